#pragma once
// The e-graph of optimize/'s equality saturation (saturate.cpp): classes of values proven equal, each a set of
// e-nodes (an op, its attributes and its input classes), with a union-find over the classes and a hash-cons over
// the e-nodes, so an e-node is added once and two equal values end in one class.
//
// An e-node's op and attributes (a graph node's, its inputs aside) are interned: its key is the attribute's id
// and its input classes, as common-subexpression elimination's key is (op, inputs, shape, dtype, ints, data, flag,
// gradient). The gradient flag is part of it: a gradient's product is never merged with the forward's by
// congruence (precision fast keeps gradient products in f32). A pinned attribute (a leaf, an output, an
// assignment, a constant holding NaN) carries the id of its graph node, so its e-node equals no other.
//
// Merges are deferred as in egg: merge() joins two classes, and rebuild() restores congruence (e-nodes whose
// inputs became equal merge their classes), until nothing changes. Union by the lower id keeps every run the same.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "meganeura/graph.hpp"

namespace mn::optimize {

using ClassId = uint32_t;
using ENodeId = uint32_t;

struct ENode {
    uint32_t attr;               // EGraph::attr
    std::vector<ClassId> kids;   // input classes, canonical as of the last rebuild
    ClassId cls;                 // its class when added (find() gives the current one)
    int32_t origin = -1;         // the graph node it was made for; -1: a rewrite made it
    ENodeId same_as;             // itself, or the equal e-node that rebuild kept in its place
};

class EGraph {
public:
    // The id of n's op and attributes (its inputs ignored); `pin` >= 0 makes one that no other node shares.
    uint32_t intern(const Node& n, int32_t pin = -1);
    const Node& attr(uint32_t a) const { return attrs_[a]; }
    bool pinned(uint32_t a) const { return pins_[a]; }

    // The e-node attr(kids), added unless an equal one exists (then `origin` is dropped).
    ENodeId add(uint32_t attr, std::vector<ClassId> kids, int32_t origin = -1);
    ClassId find(ClassId c);
    ClassId class_of(ENodeId e) { return find(nodes_[e].cls); }
    // Joins two classes (they must hold values of one shape and dtype); false when they were one already.
    bool merge(ClassId a, ClassId b);
    void rebuild();

    size_t node_count() const { return nodes_.size(); }
    size_t class_count() const { return classes_; }
    size_t merges() const { return merges_; }
    const ENode& node(ENodeId e) const { return nodes_[e]; }
    // The e-node kept for `e` (e itself unless rebuild found it equal to an earlier one).
    ENodeId canonical(ENodeId e) const;
    bool live(ENodeId e) const { return nodes_[e].same_as == e; }
    // The e-nodes of a canonical class, in the order they were added (live ones only, as of the last rebuild).
    const std::vector<ENodeId>& members(ClassId c) const { return members_[c]; }
    // What a class's values are (every e-node of a class has the same shape and dtype).
    const Shape& shape(ClassId c) { return attrs_[nodes_[members_[find(c)].front()].attr].shape; }
    DType dtype(ClassId c) { return attrs_[nodes_[members_[find(c)].front()].attr].dtype; }

private:
    struct Key {
        uint32_t attr;
        std::vector<ClassId> kids;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const;
    };
    struct AttrKey {
        Op op;
        Shape shape;
        DType dtype;
        std::vector<int64_t> ints;
        std::vector<double> data;
        bool flag, gradient;
        int32_t pin;
        bool operator==(const AttrKey&) const = default;
    };
    struct AttrHash {
        size_t operator()(const AttrKey& k) const;
    };

    std::vector<Node> attrs_;
    std::vector<bool> pins_;
    std::unordered_map<AttrKey, uint32_t, AttrHash> attr_ids_;
    std::vector<ENode> nodes_;
    std::unordered_map<Key, ENodeId, KeyHash> hashcons_;
    std::vector<ClassId> parent_;                 // union-find, one entry per class ever made
    std::vector<std::vector<ENodeId>> members_;   // of each canonical class
    size_t classes_ = 0, merges_ = 0;
};

}  // namespace mn::optimize
