// Tests of the CPU reference interpreter against values worked out by hand (or, for the few
// transcendental constants, printed by Python's math module, as noted beside each).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "meganeura/graph.hpp"
#include "reference/reference.hpp"

namespace {

using mn::DType;
using mn::Graph;
using mn::Shape;
using mn::Tensor;
using mn::ref::Feeds;
using mn::ref::Value;
using mn::ref::evaluate;
using mn::ref::round_to_half;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLn2 = 0.6931471805599453;  // math.log(2)
constexpr double kLn3 = 1.0986122886681098;  // math.log(3)
constexpr double kE = 2.718281828459045;     // math.e

// Evaluates the graph and returns t's value, after checking its shape against the node's.
Value eval(const Graph& g, Tensor t, const Feeds& feeds = {}) {
    Value v = evaluate(g, feeds).at(static_cast<size_t>(t.id));
    EXPECT_EQ(v.shape, t.shape());
    EXPECT_EQ(v.data.size(), static_cast<size_t>(mn::numel(v.shape)));
    return v;
}

void expect_values(const Value& v, const Shape& shape, const std::vector<double>& expected, double tol = 1e-12) {
    EXPECT_EQ(v.shape, shape);
    ASSERT_EQ(v.data.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
        if (std::isinf(expected[i]))
            EXPECT_EQ(v.data[i], expected[i]) << "element " << i;
        else
            EXPECT_NEAR(v.data[i], expected[i], tol) << "element " << i;
    }
}

using mn::test::error_of;

// ---- round_to_half ----

TEST(ReferenceRoundToHalf, KnownValues) {
    EXPECT_EQ(round_to_half(1.0), 1.0);
    EXPECT_EQ(round_to_half(-2.5), -2.5);
    EXPECT_EQ(round_to_half(65504), 65504);  // the largest half
    // 1/3: spacing in [0.25, 0.5) is 2^-12, 4096/3 = 1365.33 -> 1365/4096.
    EXPECT_EQ(round_to_half(1.0 / 3), 0.333251953125);
    EXPECT_EQ(round_to_half(-1.0 / 3), -0.333251953125);
    // 0.1: spacing in [2^-4, 2^-3) is 2^-14, 0.1 * 16384 = 1638.4 -> 1638 / 16384.
    EXPECT_EQ(round_to_half(0.1), 0.0999755859375);
    // Spacing in [32768, 65536) is 32: 65519 = 2047.47 * 32 -> 65504; 65520 = 2047.5 * 32 is a
    // tie that goes to the even 2048 * 32 = 65536, past the largest half: infinity.
    EXPECT_EQ(round_to_half(65519), 65504);
    EXPECT_EQ(round_to_half(65520), kInf);
    EXPECT_EQ(round_to_half(-65520), -kInf);
    EXPECT_EQ(round_to_half(1e6), kInf);
    // Ties go to even: at 1 the spacing is 2^-10; 1 + 2^-11 is half-way between 1 and 1 + 2^-10.
    EXPECT_EQ(round_to_half(1 + std::ldexp(1, -11)), 1.0);
    EXPECT_EQ(round_to_half(1 + 3 * std::ldexp(1, -11)), 1 + std::ldexp(1, -9));
    EXPECT_EQ(round_to_half(2049), 2048);  // spacing 2 from 2048: 1024.5 -> 1024
    EXPECT_EQ(round_to_half(2051), 2052);  // 1025.5 -> 1026
    // Subnormals are multiples of 2^-24. 2^-25 is half of one: a tie, to the even 0. 3 * 2^-25 is
    // 1.5 units: a tie between 1 and 2 units, to the even 2 units = 2^-23 (not 2^-24).
    EXPECT_EQ(round_to_half(std::ldexp(1, -25)), 0.0);
    EXPECT_EQ(round_to_half(std::ldexp(1, -25) * 1.0001), std::ldexp(1, -24));
    EXPECT_EQ(round_to_half(3 * std::ldexp(1, -25)), std::ldexp(1, -23));
    EXPECT_EQ(round_to_half(5 * std::ldexp(1, -25)), std::ldexp(1, -23));  // 2.5 units -> 2
    EXPECT_EQ(round_to_half(std::ldexp(1, -14)), std::ldexp(1, -14));   // smallest normal
    EXPECT_EQ(round_to_half(std::ldexp(1, -14) + std::ldexp(1, -30)), std::ldexp(1, -14));
    EXPECT_TRUE(std::signbit(round_to_half(-std::ldexp(1, -26))));  // rounds to -0
    EXPECT_EQ(round_to_half(kInf), kInf);
    EXPECT_TRUE(std::isnan(round_to_half(std::nan(""))));
}

// ---- leaves ----

TEST(ReferenceLeaves, FeedsAndConstants) {
    Graph g;
    Tensor x = g.input("x", {2, 2});
    Tensor w = g.parameter("w", {2});
    Tensor c = g.constant({1, 2, 3}, {3});
    Tensor f = g.full({2, 3}, 7);
    Tensor s = g.scalar(4);
    Feeds feeds{{"x", {{2, 2}, {1, 2, 3, 4}}}, {"w", {{2}, {5, 6}}}};
    expect_values(eval(g, x, feeds), {2, 2}, {1, 2, 3, 4});
    expect_values(eval(g, w, feeds), {2}, {5, 6});
    expect_values(eval(g, c, feeds), {3}, {1, 2, 3});
    expect_values(eval(g, f, feeds), {2, 3}, {7, 7, 7, 7, 7, 7});
    expect_values(eval(g, s, feeds), {}, {4});
}

TEST(ReferenceLeaves, FedValuesAreNormalizedToTheDtype) {
    Graph g;
    Tensor h = g.input("h", {2}, DType::F16);
    Tensor i = g.input("i", {3}, DType::I32);
    Feeds feeds{{"h", {{2}, {0.1, 1.0 / 3}}}, {"i", {{3}, {2.7, -2.7, -0.5}}}};
    expect_values(eval(g, h, feeds), {2}, {0.0999755859375, 0.333251953125}, 0);
    const Value iv = eval(g, i, feeds);
    expect_values(iv, {3}, {2, -2, 0}, 0);
    EXPECT_FALSE(std::signbit(iv.data[2]));
}

TEST(ReferenceLeaves, StateIsFedAndAssignIsItsValue) {
    Graph g;
    Tensor m = g.state("m", {2});
    Tensor w = g.parameter("w", {2});
    Tensor assigned_m = g.assign(m, m * 0.5 + w);
    Tensor assigned_w = g.assign(w, w - 1.0);
    const Feeds feeds{{"m", {{2}, {4, 6}}}, {"w", {{2}, {1, 2}}}};
    expect_values(eval(g, m, feeds), {2}, {4, 6});
    expect_values(eval(g, assigned_m, feeds), {2}, {3, 5});
    expect_values(eval(g, assigned_w, feeds), {2}, {0, 1});
    EXPECT_EQ(error_of([&] { evaluate(g, {{"w", {{2}, {1, 2}}}}); }), "reference: no value fed for state 'm'");
}

TEST(ReferenceLeaves, MissingFeedIsNamed) {
    Graph g;
    g.input("x", {2});
    g.parameter("weight", {2});
    EXPECT_EQ(error_of([&] { evaluate(g, {}); }), "reference: no value fed for input 'x'");
    EXPECT_EQ(error_of([&] { evaluate(g, {{"x", {{2}, {1, 2}}}}); }),
              "reference: no value fed for parameter 'weight'");
}

TEST(ReferenceLeaves, MisshapenFeedNamesBothShapes) {
    Graph g;
    g.input("x", {2, 3});
    const std::string message = error_of([&] { evaluate(g, {{"x", {{3, 2}, {1, 2, 3, 4, 5, 6}}}}); });
    EXPECT_NE(message.find("'x'"), std::string::npos) << message;
    EXPECT_NE(message.find(mn::shape_str({3, 2})), std::string::npos) << message;
    EXPECT_NE(message.find(mn::shape_str({2, 3})), std::string::npos) << message;
    EXPECT_NE(error_of([&] { evaluate(g, {{"x", {{2, 3}, {1, 2}}}}); }), "");  // too few values
}

// ---- unary ----

// Builds op(x) for a constant x and returns its value.
template <class Op>
Value unary(std::vector<double> x, Op op, DType dtype = DType::F32) {
    Graph g;
    const Shape shape{static_cast<int64_t>(x.size())};
    Tensor y = op(g, g.constant(std::move(x), shape, dtype));
    return eval(g, y);
}

TEST(ReferenceUnary, EachOp) {
    expect_values(unary({1, -2, 0}, [](Graph& g, Tensor x) { return g.neg(x); }), {3}, {-1, 2, 0});
    expect_values(unary({0, 1, kLn2}, [](Graph& g, Tensor x) { return g.exp(x); }), {3}, {1, kE, 2});
    expect_values(unary({1, kE, 0.25}, [](Graph& g, Tensor x) { return g.log(x); }), {3}, {0, 1, -2 * kLn2});
    expect_values(unary({4, 2.25, 0}, [](Graph& g, Tensor x) { return g.sqrt(x); }), {3}, {2, 1.5, 0});
    expect_values(unary({4, 0.25}, [](Graph& g, Tensor x) { return g.rsqrt(x); }), {2}, {0.5, 2});
    expect_values(unary({-3, 0, 2.5}, [](Graph& g, Tensor x) { return g.abs(x); }), {3}, {3, 0, 2.5});
    expect_values(unary({-1, 0, 2}, [](Graph& g, Tensor x) { return g.relu(x); }), {3}, {0, 0, 2});
    // sigmoid(ln 3) = 1 / (1 + 1/3); tanh(ln 2) = (2 - 1/2) / (2 + 1/2)
    expect_values(unary({0, kLn3}, [](Graph& g, Tensor x) { return g.sigmoid(x); }), {2}, {0.5, 0.75});
    expect_values(unary({0, kLn2}, [](Graph& g, Tensor x) { return g.tanh(x); }), {2}, {0, 0.6});
    expect_values(unary({0, kLn3}, [](Graph& g, Tensor x) { return g.silu(x); }), {2}, {0, 0.75 * kLn3});
    // 0.5 * (1 + erf(1/sqrt(2))) = 0.8413447460685429, from math.erf
    expect_values(unary({0, 1, -1}, [](Graph& g, Tensor x) { return g.gelu(x); }), {3},
                  {0, 0.8413447460685429, -0.15865525393145707});
    // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) at 1 and -1, from math.tanh
    expect_values(unary({0, 1, -1}, [](Graph& g, Tensor x) { return g.gelu(x, "tanh"); }), {3},
                  {0, 0.8411919906082768, -0.15880800939172324});
}

TEST(ReferenceUnary, SignAndGeluDerivatives) {
    auto sign = [](Graph& g, Tensor x) { return g.sign(x); };
    expect_values(unary({-2.5, 0, 3, -1e-300}, sign), {4}, {-1, 0, 1, -1}, 0);
    expect_values(unary({-7, 0, 5}, sign, DType::I32), {3}, {-1, 0, 1}, 0);
    // Phi(x) + x phi(x): 0.5 at 0; at +-1 and 2 from math.erf and math.exp (Python), and agreeing
    // with a central difference of the gelu formula to 1e-10
    expect_values(unary({0, 1, -1, 2}, [](Graph& g, Tensor x) { return g.gelu_deriv(x); }), {4},
                  {0.5, 1.0833154705876864, -0.08331547058768629, 1.085231801078197});
    // 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'(x), from math.tanh, checked the same way
    expect_values(unary({0, 1, -1, 2}, [](Graph& g, Tensor x) { return g.gelu_deriv(x, "tanh"); }), {4},
                  {0.5, 1.0829640838457826, -0.08296408384578255, 1.0860992566236183});
}

// Each gelu_deriv is the derivative of its own gelu: a central difference of the reference's
// gelu agrees with it over [-6, 6] (the two approximations differ by more than 1e-4 there).
TEST(ReferenceUnary, GeluDerivIsTheDerivativeOfGelu) {
    std::vector<double> x;
    for (double v = -6; v <= 6; v += 0.25) x.push_back(v);
    const double h = 1e-5;
    for (const char* approx : {"none", "tanh"}) {
        SCOPED_TRACE(approx);
        auto gelu_at = [&](double shift) {
            std::vector<double> shifted = x;
            for (double& v : shifted) v += shift;
            return unary(shifted, [&](Graph& g, Tensor t) { return g.gelu(t, approx); }).data;
        };
        const auto plus = gelu_at(h), minus = gelu_at(-h);
        const auto deriv = unary(x, [&](Graph& g, Tensor t) { return g.gelu_deriv(t, approx); }).data;
        for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(deriv[i], (plus[i] - minus[i]) / (2 * h), 1e-9) << x[i];
    }
}

TEST(ReferenceUnary, Cast) {
    auto to_i32 = [](Graph& g, Tensor x) { return g.cast(x, DType::I32); };
    auto to_f16 = [](Graph& g, Tensor x) { return g.cast(x, DType::F16); };
    auto to_f32 = [](Graph& g, Tensor x) { return g.cast(x, DType::F32); };
    expect_values(unary({2.7, -2.7, -0.5, 3}, to_i32), {4}, {2, -2, 0, 3}, 0);
    expect_values(unary({1.0 / 3, 65520}, to_f16), {2}, {0.333251953125, kInf}, 0);
    expect_values(unary({1.0 / 3}, to_f32), {1}, {1.0 / 3}, 0);
    expect_values(unary({-7, 5}, to_f32, DType::I32), {2}, {-7, 5}, 0);
}

TEST(ReferenceUnary, F16ResultsAreRounded) {
    Graph g;
    Tensor x = g.constant({1, 2}, {2}, DType::F16);
    Tensor y = g.div(x, g.scalar(3, DType::F16));
    expect_values(eval(g, y), {2}, {0.333251953125, 0.66650390625}, 0);  // 2730/4096
}

// ---- binary ----

TEST(ReferenceBinary, BroadcastRowAgainstMatrix) {
    Graph g;
    Tensor a = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor b = g.constant({10, 20, 30}, {3});
    expect_values(eval(g, g.add(a, b)), {2, 3}, {11, 22, 33, 14, 25, 36});
    expect_values(eval(g, g.sub(b, a)), {2, 3}, {9, 18, 27, 6, 15, 24});
}

TEST(ReferenceBinary, BroadcastColumnAgainstRow) {
    Graph g;
    Tensor a = g.constant({1, 2}, {2, 1});
    Tensor b = g.constant({3, 4, 5}, {1, 3});
    expect_values(eval(g, g.mul(a, b)), {2, 3}, {3, 4, 5, 6, 8, 10});
}

TEST(ReferenceBinary, EachOp) {
    Graph g;
    Tensor a = g.constant({1, -6, 9, 2}, {4});
    Tensor b = g.constant({4, 3, 0.5, 2}, {4});
    expect_values(eval(g, g.div(a, b)), {4}, {0.25, -2, 18, 1});
    expect_values(eval(g, g.maximum(a, b)), {4}, {4, 3, 9, 2});
    expect_values(eval(g, g.minimum(a, b)), {4}, {1, -6, 0.5, 2});
    expect_values(eval(g, g.pow(a, b)), {4}, {1, -216, 3, 4});
    expect_values(eval(g, g.pow(a, 2.0)), {4}, {1, 36, 81, 4});
    expect_values(eval(g, a * 2.0 + 1.0), {4}, {3, -11, 19, 5});
}

TEST(ReferenceBinary, Comparisons) {
    Graph g;
    Tensor a = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor b = g.constant({3, 5}, {2, 1});  // row 0 against 3, row 1 against 5
    expect_values(eval(g, g.greater(a, b)), {2, 3}, {0, 0, 0, 0, 0, 1}, 0);
    expect_values(eval(g, g.greater(b, a)), {2, 3}, {1, 1, 0, 1, 0, 0}, 0);
    expect_values(eval(g, g.equal(a, b)), {2, 3}, {0, 0, 1, 0, 1, 0}, 0);
    Tensor i = g.constant({-1, 0, 1}, {3}, DType::I32);
    Tensor y = g.greater(i, g.constant({0}, {1}, DType::I32));
    EXPECT_EQ(y.dtype(), DType::I32);
    expect_values(eval(g, y), {3}, {0, 0, 1}, 0);
}

TEST(ReferenceBinary, I32DivisionTruncatesTowardZero) {
    Graph g;
    Tensor a = g.constant({7, -7, 7, -7, 1}, {5}, DType::I32);
    Tensor b = g.constant({2, 2, -2, -2, 3}, {5}, DType::I32);
    expect_values(eval(g, g.div(a, b)), {5}, {3, -3, -3, 3, 0}, 0);
}

TEST(ReferenceBinary, I32DivisionByZeroIsAnError) {
    Graph g;
    Tensor y = g.div(g.constant({1}, {1}, DType::I32), g.constant({0}, {1}, DType::I32));
    (void)y;
    EXPECT_NE(error_of([&] { evaluate(g, {}); }).find("div"), std::string::npos);
}

// ---- reductions ----

// x[i, j, k] = 12 i + 4 j + k for shape [2, 3, 4], i.e. 0..23 in order.
Tensor iota_2x3x4(Graph& g) {
    std::vector<double> v(24);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
    return g.constant(v, {2, 3, 4});
}

TEST(ReferenceReduce, MiddleAxis) {
    Graph g;
    Tensor x = iota_2x3x4(g);
    // sum over j of (12 i + 4 j + k) = 36 i + 12 + 3 k
    expect_values(eval(g, g.sum(x, {1})), {2, 4}, {12, 15, 18, 21, 48, 51, 54, 57});
    expect_values(eval(g, g.sum(x, {1}, true)), {2, 1, 4}, {12, 15, 18, 21, 48, 51, 54, 57});
    expect_values(eval(g, g.mean(x, {-2})), {2, 4}, {4, 5, 6, 7, 16, 17, 18, 19});
    expect_values(eval(g, g.mean(x, {1}, true)), {2, 1, 4}, {4, 5, 6, 7, 16, 17, 18, 19});
    // max over j is at j = 2: 12 i + 8 + k
    expect_values(eval(g, g.max(x, {1})), {2, 4}, {8, 9, 10, 11, 20, 21, 22, 23});
    expect_values(eval(g, g.max(x, {1}, true)), {2, 1, 4}, {8, 9, 10, 11, 20, 21, 22, 23});
}

TEST(ReferenceReduce, OuterAxesAndAll) {
    Graph g;
    Tensor x = iota_2x3x4(g);
    // sum over i, k of (12 i + 4 j + k) = 12*4 + 32 j + 2*6 = 60 + 32 j
    expect_values(eval(g, g.sum(x, {0, 2})), {3}, {60, 92, 124});
    expect_values(eval(g, g.sum(x, {2, 0}, true)), {1, 3, 1}, {60, 92, 124});
    expect_values(eval(g, g.mean(x, {0, 2})), {3}, {7.5, 11.5, 15.5});
    expect_values(eval(g, g.sum(x)), {}, {276});  // 0 + ... + 23
    expect_values(eval(g, g.mean(x)), {}, {11.5});
    expect_values(eval(g, g.max(x, {}, true)), {1, 1, 1}, {23});
}

TEST(ReferenceReduce, SoftmaxRows) {
    Graph g;
    // Row 0: exp gives 1, 2, 3 (sum 6). Row 1: all equal. Row 2: row 0 shifted by 1000, which
    // overflows exp unless the max is subtracted first.
    Tensor x = g.constant({0, kLn2, kLn3, 5, 5, 5, 1000, 1000 + kLn2, 1000 + kLn3}, {3, 3});
    const Value p = eval(g, g.softmax(x));
    expect_values(p, {3, 3}, {1.0 / 6, 1.0 / 3, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3, 1.0 / 6, 1.0 / 3, 0.5}, 1e-12);
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(p.data[3 * r] + p.data[3 * r + 1] + p.data[3 * r + 2], 1.0, 1e-15);
    // log(1/6) = -ln 2 - ln 3
    expect_values(eval(g, g.log_softmax(x, 1)), {3, 3},
                  {-kLn2 - kLn3, -kLn3, -kLn2, -kLn3, -kLn3, -kLn3, -kLn2 - kLn3, -kLn3, -kLn2}, 1e-12);
}

TEST(ReferenceReduce, SoftmaxAlongFirstAxis) {
    Graph g;
    Tensor x = g.constant({0, 0, kLn3, 0}, {2, 2});
    // column 0: exp gives 1, 3; column 1: 1, 1
    expect_values(eval(g, g.softmax(x, 0)), {2, 2}, {0.25, 0.5, 0.75, 0.5});
    expect_values(eval(g, g.log_softmax(x, 0)), {2, 2}, {-2 * kLn2, -kLn2, kLn3 - 2 * kLn2, -kLn2});
}

TEST(ReferenceReduce, CrossEntropy) {
    Graph g;
    Tensor logits = g.input("logits", {2, 3});
    Tensor labels = g.input("labels", {2}, DType::I32);
    Tensor loss = g.cross_entropy(logits, labels);
    const std::vector<double> l{0, kLn2, kLn3, 1, 1, 1};
    // row 0: logsumexp = ln(1 + 2 + 3) = ln 6, label 2 -> ln 6 - ln 3 = ln 2
    // row 1: logsumexp = 1 + ln 3, label 0 -> ln 3. Mean: (ln 2 + ln 3) / 2.
    expect_values(eval(g, loss, {{"logits", {{2, 3}, l}}, {"labels", {{2}, {2, 0}}}}), {}, {(kLn2 + kLn3) / 2});
    // row 0 label 0: ln 6; row 1 label 2: ln 3
    expect_values(eval(g, loss, {{"logits", {{2, 3}, l}}, {"labels", {{2}, {0, 2}}}}), {},
                  {(kLn2 + 2 * kLn3) / 2});
    // shifting a row by a constant changes nothing, even by 1000 (exp(1000) overflows)
    const std::vector<double> big{1000, 1000 + kLn2, 1000 + kLn3, 1, 1, 1};
    expect_values(eval(g, loss, {{"logits", {{2, 3}, big}}, {"labels", {{2}, {2, 0}}}}), {}, {(kLn2 + kLn3) / 2},
                  1e-12);
}

// torch's F.cross_entropy(ignore_index=-100): ignored rows add nothing and the mean is over the rest;
// with every row ignored the mean is 0 / 0 (NaN, as in torch).
TEST(ReferenceReduce, CrossEntropyIgnoresLabelsAndMeansOverTheCounted) {
    Graph g;
    Tensor logits = g.input("logits", {3, 3});
    Tensor labels = g.input("labels", {3}, DType::I32);
    const std::vector<double> l{0, kLn2, kLn3, 1, 1, 1, 5, -2, 0};
    // row 0 label 2: ln 2; row 1 label 0: ln 3; row 2 ignored
    expect_values(eval(g, g.cross_entropy(logits, labels), {{"logits", {{3, 3}, l}}, {"labels", {{3}, {2, 0, -100}}}}), {},
                  {(kLn2 + kLn3) / 2});
    // another ignore index: -100 is then an out-of-range label, 7 is ignored
    Graph h;
    h.cross_entropy(h.input("logits", {3, 3}), h.input("labels", {3}, DType::I32), 7);
    EXPECT_EQ(error_of([&] { evaluate(h, {{"logits", {{3, 3}, l}}, {"labels", {{3}, {2, 7, -100}}}}); }),
              "reference: cross_entropy label -100 in row 2 is outside [0, 3)");
    const Value none = eval(g, g.cross_entropy(logits, labels), {{"logits", {{3, 3}, l}}, {"labels", {{3}, {-100, -100, -100}}}});
    EXPECT_TRUE(std::isnan(none.data.at(0)));
    // the gradient: row 0 and row 1 as in CrossEntropyGrad below, over 2 counted rows; row 2 zero
    Tensor grad = g.cross_entropy_grad(logits, labels, g.input("g", {}));
    const Feeds feeds{{"logits", {{3, 3}, l}}, {"labels", {{3}, {2, 0, -100}}}, {"g", {{}, {4}}}};
    expect_values(eval(g, grad, feeds), {3, 3}, {1.0 / 3, 2.0 / 3, -1, -4.0 / 3, 2.0 / 3, 2.0 / 3, 0, 0, 0});
}

TEST(ReferenceReduce, CrossEntropyBadLabelIsNamed) {
    Graph g;
    g.cross_entropy(g.input("logits", {2, 3}), g.input("labels", {2}, DType::I32));
    const std::vector<double> l(6, 0.0);
    EXPECT_EQ(error_of([&] { evaluate(g, {{"logits", {{2, 3}, l}}, {"labels", {{2}, {0, 3}}}}); }),
              "reference: cross_entropy label 3 in row 1 is outside [0, 3)");
    EXPECT_EQ(error_of([&] { evaluate(g, {{"logits", {{2, 3}, l}}, {"labels", {{2}, {-1, 0}}}}); }),
              "reference: cross_entropy label -1 in row 0 is outside [0, 3)");
}

TEST(ReferenceReduce, CrossEntropyGrad) {
    Graph g;
    Tensor logits = g.input("logits", {2, 3});
    Tensor labels = g.input("labels", {2}, DType::I32);
    Tensor grad = g.cross_entropy_grad(logits, labels, g.input("g", {}));
    // row 0: softmax of (0, ln 2, ln 3) is (1, 2, 3) / 6, label 2; row 1: uniform 1/3, label 0.
    // Times g / N = 4 / 2: 2 * (1/6, 1/3, 1/2 - 1) and 2 * (1/3 - 1, 1/3, 1/3).
    const Feeds feeds{{"logits", {{2, 3}, {0, kLn2, kLn3, 1, 1, 1}}}, {"labels", {{2}, {2, 0}}}, {"g", {{}, {4}}}};
    expect_values(eval(g, grad, feeds), {2, 3}, {1.0 / 3, 2.0 / 3, -1, -4.0 / 3, 2.0 / 3, 2.0 / 3});
    Feeds bad = feeds;
    bad["labels"].data = {0, 3};
    EXPECT_EQ(error_of([&] { evaluate(g, bad); }), "reference: cross_entropy_grad label 3 in row 1 is outside [0, 3)");
}

TEST(ReferenceReduce, MseLoss) {
    Graph g;
    Tensor a = g.constant({1, 2, 3, 4}, {2, 2});
    Tensor b = g.constant({1, 0, 6, 4}, {2, 2});
    expect_values(eval(g, g.mse_loss(a, b)), {}, {13.0 / 4});  // (0 + 4 + 9 + 0) / 4
}

// ---- matmul ----

// A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [1, 1]]: A @ B = [[4, 5], [10, 11]].
TEST(ReferenceMatMul, TransposeFlags) {
    Graph g;
    Tensor a = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor at = g.constant({1, 4, 2, 5, 3, 6}, {3, 2});
    Tensor b = g.constant({1, 0, 0, 1, 1, 1}, {3, 2});
    Tensor bt = g.constant({1, 0, 1, 0, 1, 1}, {2, 3});
    const std::vector<double> ab{4, 5, 10, 11};
    expect_values(eval(g, g.matmul(a, b)), {2, 2}, ab);
    expect_values(eval(g, g.matmul(at, b, true, false)), {2, 2}, ab);
    expect_values(eval(g, g.matmul(a, bt, false, true)), {2, 2}, ab);
    expect_values(eval(g, g.matmul(at, bt, true, true)), {2, 2}, ab);
    // B @ A: [3, 2] @ [2, 3] = [[1, 2, 3], [4, 5, 6], [5, 7, 9]]
    expect_values(eval(g, g.matmul(b, a)), {3, 3}, {1, 2, 3, 4, 5, 6, 5, 7, 9});
}

TEST(ReferenceMatMul, BroadcastBatch) {
    Graph g;
    // a: batch [2, 1] of 1x2 rows a0 = [1, 2], a1 = [3, 4]; b: batch [3] of 2x1 columns [1, j].
    Tensor a = g.constant({1, 2, 3, 4}, {2, 1, 1, 2});
    Tensor b = g.constant({1, 0, 1, 1, 1, 2}, {3, 2, 1});
    // out[i, j] = a_i . [1, j]: row 0: 1 + 2 j; row 1: 3 + 4 j
    expect_values(eval(g, g.matmul(a, b)), {2, 3, 1, 1}, {1, 3, 5, 3, 7, 11});
    // the same with b stored as [3, 1, 2] rows and read transposed
    Tensor b_rows = g.constant({1, 0, 1, 1, 1, 2}, {3, 1, 2});
    expect_values(eval(g, g.matmul(a, b_rows, false, true)), {2, 3, 1, 1}, {1, 3, 5, 3, 7, 11});
}

TEST(ReferenceMatMul, BatchedTransposedA) {
    Graph g;
    // two batches of A^T stored [2, 2, 1]: A0 = [[1, 2]], A1 = [[3, 4]] (1x2); B shared [2, 2]
    Tensor at = g.constant({1, 2, 3, 4}, {2, 2, 1});
    Tensor b = g.constant({1, 2, 3, 4}, {2, 2});
    // [1, 2] @ [[1, 2], [3, 4]] = [7, 10]; [3, 4] @ ... = [15, 22]
    expect_values(eval(g, g.matmul(at, b, true, false)), {2, 1, 2}, {7, 10, 15, 22});
}

TEST(ReferenceMatMul, Linear) {
    Graph g;
    Tensor x = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor w = g.constant({1, 0, 0, 1, 1, 1}, {2, 3});  // out 0 = x0, out 1 = x0 + x1 + x2
    Tensor b = g.constant({10, 20}, {2});
    expect_values(eval(g, g.linear(x, w, b)), {2, 2}, {11, 26, 14, 35});
}

// ---- data movement ----

TEST(ReferenceData, Reshape) {
    Graph g;
    Tensor x = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    expect_values(eval(g, g.reshape(x, {3, -1})), {3, 2}, {1, 2, 3, 4, 5, 6});
    expect_values(eval(g, g.flatten(g.reshape(x, {1, 2, 3}))), {1, 6}, {1, 2, 3, 4, 5, 6});
}

TEST(ReferenceData, PermuteAndTranspose) {
    Graph g;
    Tensor x = iota_2x3x4(g);
    // out[k, i, j] = x[i, j, k] = 12 i + 4 j + k
    expect_values(eval(g, g.permute(x, {2, 0, 1})), {4, 2, 3},
                  {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
    Tensor m = g.constant({1, 2, 3, 4, 5, 6}, {2, 3});
    expect_values(eval(g, g.transpose(m, 0, 1)), {3, 2}, {1, 4, 2, 5, 3, 6});
}

TEST(ReferenceData, SliceWithStep) {
    Graph g;
    Tensor v = g.constant({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10});
    expect_values(eval(g, g.slice(v, 0, 1, 8, 3)), {3}, {1, 4, 7});
    expect_values(eval(g, g.slice(v, 0, -3, 10)), {3}, {7, 8, 9});
    Tensor m = g.constant({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
    expect_values(eval(g, g.slice(m, 1, 1, 4, 2)), {3, 2}, {1, 3, 5, 7, 9, 11});
    expect_values(eval(g, g.slice(m, 0, 1, 3)), {2, 4}, {4, 5, 6, 7, 8, 9, 10, 11});
}

TEST(ReferenceData, Concat) {
    Graph g;
    Tensor a = g.constant({1, 2}, {2, 1});
    Tensor b = g.constant({3, 4, 5, 6}, {2, 2});
    expect_values(eval(g, g.concat({a, b}, 1)), {2, 3}, {1, 3, 4, 2, 5, 6});
    Tensor r = g.constant({7, 8}, {1, 2});
    expect_values(eval(g, g.concat({r, b, r}, 0)), {4, 2}, {7, 8, 3, 4, 5, 6, 7, 8});
}

TEST(ReferenceData, Expand) {
    Graph g;
    expect_values(eval(g, g.expand(g.constant({1, 2, 3}, {3}), {2, 3})), {2, 3}, {1, 2, 3, 1, 2, 3});
    expect_values(eval(g, g.expand(g.constant({1, 2}, {2, 1}), {2, 3})), {2, 3}, {1, 1, 1, 2, 2, 2});
    expect_values(eval(g, g.expand(g.constant({1, 2}, {2, 1}), {2, 2, 2})), {2, 2, 2}, {1, 1, 2, 2, 1, 1, 2, 2});
    expect_values(eval(g, g.expand(g.scalar(5), {2})), {2}, {5, 5});
}

}  // namespace
