#include "optimize/egraph.hpp"

#include <bit>
#include <algorithm>

namespace mn::optimize {
namespace {

size_t mix(size_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

}  // namespace

size_t EGraph::KeyHash::operator()(const Key& k) const {
    size_t h = k.attr;
    for (ClassId c : k.kids) h = mix(h, c);
    return h;
}

size_t EGraph::AttrHash::operator()(const AttrKey& k) const {
    size_t h = mix(static_cast<size_t>(k.op), static_cast<uint64_t>(k.dtype) | uint64_t{k.flag} << 8 | uint64_t{k.gradient} << 9);
    h = mix(h, static_cast<uint64_t>(static_cast<int64_t>(k.pin)));
    for (int64_t d : k.shape) h = mix(h, static_cast<uint64_t>(d));
    for (int64_t v : k.ints) h = mix(h, static_cast<uint64_t>(v));
    for (double v : k.data) h = mix(h, std::bit_cast<uint64_t>(v));
    return h;
}

uint32_t EGraph::intern(const Node& n, int32_t pin) {
    AttrKey key{n.op, n.shape, n.dtype, n.ints, n.data, n.flag, n.gradient, pin};
    if (const auto it = attr_ids_.find(key); it != attr_ids_.end()) return it->second;
    Node a = n;
    a.inputs.clear();
    attrs_.push_back(std::move(a));
    pins_.push_back(pin >= 0);
    const auto id = static_cast<uint32_t>(attrs_.size() - 1);
    attr_ids_.emplace(std::move(key), id);
    return id;
}

ClassId EGraph::find(ClassId c) {
    while (parent_[c] != c) {
        parent_[c] = parent_[parent_[c]];
        c = parent_[c];
    }
    return c;
}

ENodeId EGraph::canonical(ENodeId e) const {
    while (nodes_[e].same_as != e) e = nodes_[e].same_as;
    return e;
}

ENodeId EGraph::add(uint32_t attr, std::vector<ClassId> kids, int32_t origin) {
    for (ClassId& k : kids) k = find(k);
    Key key{attr, kids};
    if (const auto it = hashcons_.find(key); it != hashcons_.end()) return it->second;
    const auto e = static_cast<ENodeId>(nodes_.size());
    const auto c = static_cast<ClassId>(parent_.size());
    nodes_.push_back({attr, std::move(kids), c, origin, e});
    parent_.push_back(c);
    members_.push_back({e});
    ++classes_;
    hashcons_.emplace(std::move(key), e);
    return e;
}

bool EGraph::merge(ClassId a, ClassId b) {
    a = find(a);
    b = find(b);
    if (a == b) return false;
    if (shape(a) != shape(b) || dtype(a) != dtype(b)) {
        throw Error("saturate: a rule equated values of shapes " + shape_str(shape(a)) + " " + dtype_name(dtype(a)) + " and " +
                    shape_str(shape(b)) + " " + dtype_name(dtype(b)));
    }
    if (b < a) std::swap(a, b);
    parent_[b] = a;
    members_[a].insert(members_[a].end(), members_[b].begin(), members_[b].end());
    members_[b].clear();
    members_[b].shrink_to_fit();
    --classes_;
    ++merges_;
    return true;
}

void EGraph::rebuild() {
    for (bool changed = true; changed;) {
        changed = false;
        hashcons_.clear();
        for (ENodeId e = 0; e < nodes_.size(); ++e) {
            ENode& n = nodes_[e];
            if (n.same_as != e) continue;
            for (ClassId& k : n.kids) k = find(k);
            const auto [it, added] = hashcons_.try_emplace(Key{n.attr, n.kids}, e);
            if (added) continue;
            // Equal to an earlier e-node: one class, and this one goes (the earlier keeps its origin).
            changed = merge(nodes_[it->second].cls, n.cls) || changed;
            n.same_as = it->second;
        }
    }
    for (ClassId c = 0; c < parent_.size(); ++c) {
        if (parent_[c] != c) continue;
        std::erase_if(members_[c], [&](ENodeId e) { return !live(e); });
        std::sort(members_[c].begin(), members_[c].end());
    }
}

}  // namespace mn::optimize
