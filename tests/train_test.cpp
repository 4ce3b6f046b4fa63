// Training end to end on the GPU: losses fall, optimizer steps match torch.optim, checkpoints
// round-trip bit-exactly, and a resumed run continues the same trajectory.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.hpp"
#include "gpu_check.hpp"
#include "host_tools.hpp"
#include "io/safetensors.hpp"

namespace mn::test {
namespace {

using TrainTest = GpuTest;

// A two-layer MLP classifying points by the sign of a fixed random projection.
struct Problem {
    Graph g;
    Tensor loss;
    std::vector<float> x;
    std::vector<int32_t> y;
    Problem() {
        auto in = g.input("x", {32, 8});
        auto labels = g.input("labels", {32}, DType::I32);
        auto h = g.tanh(g.linear(in, g.parameter("fc1.weight", {16, 8}, Init::uniform(-0.35, 0.35)),
                                 g.parameter("fc1.bias", {16}, Init::uniform(-0.35, 0.35))));
        auto logits = g.linear(h, g.parameter("fc2.weight", {2, 16}, Init::uniform(-0.25, 0.25)),
                               g.parameter("fc2.bias", {2}));
        loss = g.cross_entropy(logits, labels);
        std::mt19937 rng(3);
        std::normal_distribution<float> n;
        for (int i = 0; i < 32; ++i) {
            float dot = 0;
            for (int j = 0; j < 8; ++j) {
                x.push_back(n(rng));
                dot += x.back() * (j % 3 == 0 ? 1.f : -0.5f);
            }
            y.push_back(dot > 0);
        }
    }
    Session compile_with(Optimizer opt) {
        Session s = compile(g, device(), {.loss = loss, .optimizer = opt, .seed = 5});
        s.set("x", x);
        s.set("labels", y);
        return s;
    }
};

TEST_F(TrainTest, LossDecreasesWithEveryOptimizer) {
    for (Optimizer opt : {Optimizer{SGD{.lr = 0.5, .momentum = 0.9}}, Optimizer{Adam{.lr = 0.02}},
                          Optimizer{AdamW{.lr = 0.02}}}) {
        Problem p;
        Session s = p.compile_with(opt);
        const float first = s.step();
        float last = first;
        for (int i = 0; i < 60; ++i) last = s.step();
        EXPECT_LT(last, 0.5f * first) << "optimizer #" << opt.index();
        EXPECT_EQ(s.step_count(), 61);
    }
}


// ---- helpers for the optimizer and checkpoint tests ---------------------------------------------

// A unique file path under the temp directory, removed (with its directory) when the object goes.
class TempPath {
public:
    explicit TempPath(const std::string& tag) : dir_(tag), path_(dir_.path(tag + ".safetensors")) {}
    const std::string& str() const { return path_; }

private:
    mn::test::TempDir dir_;
    std::string path_;
};

std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
        num += d * d;
        den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
    }
    return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// The message of the mn::Error that s.load(path) throws; empty when it does not throw.
std::string load_error(Session& s, const std::string& path) {
    try {
        s.load(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Parameters and optimizer state of Problem, by the names the checkpoint uses.
const std::vector<std::string> kProblemParams = {"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"};

std::vector<std::string> adam_persistent_names() {
    std::vector<std::string> names = kProblemParams;
    for (const auto& p : kProblemParams) {
        names.push_back("optimizer.exp_avg." + p);
        names.push_back("optimizer.exp_avg_sq." + p);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::map<std::string, std::vector<float>> snapshot(const Session& s, const std::vector<std::string>& names) {
    std::map<std::string, std::vector<float>> out;
    for (const auto& n : names) out[n] = s.get(n);
    return out;
}

// Command-line arguments for tests/torch/optim_steps.py that describe `o`.
std::string torch_args(const CompileOptions& o) {
    std::ostringstream a;
    a.precision(17);
    if (const auto* s = std::get_if<SGD>(&o.optimizer)) {
        a << " --optimizer sgd --lr " << s->lr << " --momentum " << s->momentum << " --weight-decay " << s->weight_decay;
    } else if (const auto* s = std::get_if<Adam>(&o.optimizer)) {
        a << " --optimizer adam --lr " << s->lr << " --beta1 " << s->beta1 << " --beta2 " << s->beta2 << " --eps "
          << s->eps << " --weight-decay " << s->weight_decay;
    } else if (const auto* s = std::get_if<AdamW>(&o.optimizer)) {
        a << " --optimizer adamw --lr " << s->lr << " --beta1 " << s->beta1 << " --beta2 " << s->beta2 << " --eps "
          << s->eps << " --weight-decay " << s->weight_decay;
    }
    if (o.clip_grad_norm > 0) a << " --clip-grad-norm " << o.clip_grad_norm;
    a << " --warmup-steps " << o.schedule.warmup_steps << " --decay "
      << (o.schedule.decay == LrSchedule::Decay::Cosine ? "cosine" : "constant") << " --total-steps "
      << o.schedule.total_steps << " --min-lr-ratio " << o.schedule.min_lr_ratio;
    return a.str();
}

// ---- 1. optimizer steps vs torch.optim ----------------------------------------------------------

// loss = sum(p * G), so d loss / d p = G exactly: three steps with three different G's must land
// where torch.optim lands from the same initial p (float32 on both sides).
TEST_F(TrainTest, OptimizerStepsMatchTorch) {
    MN_REQUIRE_TORCH();
    const std::string script = source_dir() + "/tests/torch/optim_steps.py";
    const Shape shape = {7, 33};
    const LrSchedule cosine{.decay = LrSchedule::Decay::Cosine, .warmup_steps = 2, .total_steps = 5};
    struct Case {
        std::string label;
        Optimizer opt;
        double clip = 0;
        LrSchedule schedule = {};
    };
    const SGD sgd_momentum{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    const AdamW adamw{.lr = 1e-2, .weight_decay = 0.1};
    const std::vector<Case> cases = {
        {"SGD", SGD{.lr = 0.1}},
        {"SGD momentum + weight decay", sgd_momentum},
        {"Adam", Adam{.lr = 1e-2}},
        {"Adam + weight decay", Adam{.lr = 1e-2, .weight_decay = 0.1}},
        {"AdamW", adamw},
        {"SGD momentum, clip_grad_norm 0.5", sgd_momentum, 0.5},
        {"AdamW, clip_grad_norm 0.5", adamw, 0.5},
        {"AdamW, warmup 2 + cosine to 5", adamw, 0, cosine},
        {"SGD momentum, warmup 2 + cosine to 5", sgd_momentum, 0, cosine},
    };
    constexpr int kSteps = 3;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const Case& c = cases[ci];
        SCOPED_TRACE(c.label);
        Graph g;
        Tensor p = g.parameter("p", shape, Init::uniform(-1, 1));
        Tensor G = g.input("G", shape);
        const CompileOptions options{.loss = g.sum(p * G),
                                     .optimizer = c.opt,
                                     .schedule = c.schedule,
                                     .clip_grad_norm = c.clip,
                                     .seed = 11 + ci};
        Session s = compile(g, device(), options);
        const std::vector<float> p0 = s.get("p");

        io::TensorMap in;
        in["p"] = io::TensorData::from_f32(shape, p0);
        std::mt19937 rng(static_cast<uint32_t>(100 + ci));
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (int t = 0; t < kSteps; ++t) {
            std::vector<float> grad(static_cast<size_t>(numel(shape)));
            for (auto& x : grad) x = u(rng);
            s.set("G", grad);
            s.step();
            in["G" + std::to_string(t)] = io::TensorData::from_f32(shape, grad);
        }
        const std::vector<float> got = s.get("p");

        TempPath in_path("torch_in"), out_path("torch_out");
        io::write_safetensors(in_path.str(), in);
        const std::string cmd = reference_python() + " '" + script + "' '" + in_path.str() + "' '" + out_path.str() + "'" +
                                torch_args(options);
        ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
        const io::TensorMap out = io::read_safetensors(out_path.str());
        ASSERT_TRUE(out.count("p")) << cmd;
        ASSERT_EQ(out.at("p").dtype, "F32");
        ASSERT_EQ(out.at("p").shape, shape);
        const std::vector<float> want = out.at("p").to_f32();

        // The steps moved p well beyond rounding, so agreeing says something.
        EXPECT_GT(relative_l2(want, p0), 1e-3) << cmd;
        EXPECT_LE(relative_l2(got, want), 1e-6) << cmd;
        EXPECT_EQ(s.step_count(), kSteps);
    }
}

// ---- 2. checkpoint round trip -------------------------------------------------------------------

TEST_F(TrainTest, CheckpointRoundTripIsBitExact) {
    Problem prob;
    const Optimizer opt = AdamW{.lr = 0.02};
    Session a = prob.compile_with(opt);
    for (int i = 0; i < 5; ++i) a.step();
    TempPath path("roundtrip");
    a.save(path.str());

    // The file holds exactly the parameters and the optimizer state, plus the step in the metadata.
    const std::vector<std::string> names = adam_persistent_names();
    const io::TensorMap file = io::read_safetensors(path.str());
    std::vector<std::string> in_file;
    for (const auto& [name, t] : file) in_file.push_back(name);
    EXPECT_EQ(in_file, names);
    EXPECT_EQ(io::read_safetensors_metadata(path.str()).at("meganeura.step"), "5");

    Session b = prob.compile_with(opt);
    EXPECT_NE(b.get("fc1.weight"), a.get("fc1.weight"));  // the fresh session starts elsewhere
    EXPECT_EQ(b.step_count(), 0);
    b.load(path.str());
    EXPECT_EQ(b.step_count(), 5);
    for (const auto& name : names) EXPECT_EQ(b.get(name), a.get(name)) << name;
    // And the file's bytes are the session's values.
    for (const auto& name : names) EXPECT_EQ(file.at(name).to_f32(), a.get(name)) << name;
}

// An output that is a parameter (here fc1.weight's) names no second tensor: the checkpoint holds the parameter once,
// and a load writes it once (twice in one program were two copies of the same bytes without a barrier between); and
// both names read what the load wrote, before any run.
TEST_F(TrainTest, AnOutputOfAParameterIsNoSecondTensorOfTheCheckpoint) {
    Problem prob;
    prob.g.output("fc1 weight out", *prob.g.find("fc1.weight"));
    Session a = prob.compile_with(AdamW{.lr = 0.02});
    a.step();
    TempPath path("alias");
    a.save(path.str());
    std::vector<std::string> in_file;
    for (const auto& [name, t] : io::read_safetensors(path.str())) in_file.push_back(name);
    EXPECT_EQ(in_file, adam_persistent_names());
    Session b = prob.compile_with(AdamW{.lr = 0.02});
    b.load(path.str());
    EXPECT_EQ(b.get("fc1.weight"), a.get("fc1.weight"));
    EXPECT_EQ(b.get("fc1 weight out"), a.get("fc1.weight"));
}

// ---- 3. resume ----------------------------------------------------------------------------------

TEST_F(TrainTest, ResumeContinuesTheSameTrajectory) {
    Problem prob;
    const Optimizer opt = AdamW{.lr = 0.02};
    Session a = prob.compile_with(opt);
    std::vector<float> losses_a;
    for (int i = 0; i < 10; ++i) losses_a.push_back(a.step());

    TempPath path("resume");
    {
        Session b = prob.compile_with(opt);
        for (int i = 0; i < 5; ++i) EXPECT_EQ(b.step(), losses_a[static_cast<size_t>(i)]) << "step " << i + 1;
        b.save(path.str());
    }
    Session c = prob.compile_with(opt);
    c.load(path.str());
    EXPECT_EQ(c.step_count(), 5);
    for (int i = 5; i < 10; ++i) EXPECT_EQ(c.step(), losses_a[static_cast<size_t>(i)]) << "step " << i + 1;
    EXPECT_EQ(c.step_count(), 10);
    for (const auto& name : adam_persistent_names()) EXPECT_EQ(c.get(name), a.get(name)) << name;
}

// ---- 4. bad checkpoints -------------------------------------------------------------------------

TEST_F(TrainTest, BadCheckpointsNameTheTensorAndLeaveTheSessionUnchanged) {
    Problem prob;
    const Optimizer opt = AdamW{.lr = 0.02};
    const std::vector<std::string> names = adam_persistent_names();

    // A good checkpoint of a session 6 steps in; the session under test is 3 steps in, so every
    // tensor of the file differs from the session's and a partial load would show.
    TempPath good("good");
    {
        Session other = prob.compile_with(opt);
        for (int i = 0; i < 6; ++i) other.step();
        other.save(good.str());
    }
    const io::TensorMap file = io::read_safetensors(good.str());
    const auto meta = io::read_safetensors_metadata(good.str());

    Session s = prob.compile_with(opt);
    for (int i = 0; i < 3; ++i) s.step();
    const auto before = snapshot(s, names);
    for (const auto& name : names) ASSERT_NE(file.at(name).to_f32(), before.at(name)) << name;

    auto expect_unchanged = [&](const std::string& what) {
        EXPECT_EQ(s.step_count(), 3) << what;
        for (const auto& name : names) EXPECT_EQ(s.get(name), before.at(name)) << what << ": " << name;
    };

    {  // (a) a parameter is missing
        io::TensorMap m = file;
        m.erase("fc1.weight");
        TempPath p("missing");
        io::write_safetensors(p.str(), m, meta);
        const std::string err = load_error(s, p.str());
        EXPECT_NE(err.find("missing tensor 'fc1.weight'"), std::string::npos) << err;
        expect_unchanged("missing tensor");
    }
    {  // (b) a parameter has the wrong shape
        io::TensorMap m = file;
        m["fc2.bias"] = io::TensorData::from_f32({3}, {1.f, 2.f, 3.f});
        TempPath p("shape");
        io::write_safetensors(p.str(), m, meta);
        const std::string err = load_error(s, p.str());
        EXPECT_NE(err.find("'fc2.bias' has shape"), std::string::npos) << err;
        expect_unchanged("wrong shape");
    }
    {  // (b') an optimizer state has the wrong shape
        io::TensorMap m = file;
        m["optimizer.exp_avg_sq.fc1.weight"] = io::TensorData::from_f32({8, 16}, std::vector<float>(128, 0.5f));
        TempPath p("state_shape");
        io::write_safetensors(p.str(), m, meta);
        const std::string err = load_error(s, p.str());
        EXPECT_NE(err.find("'optimizer.exp_avg_sq.fc1.weight' has shape"), std::string::npos) << err;
        expect_unchanged("wrong state shape");
    }
    {  // (c) truncated: the last 100 bytes cut
        std::vector<uint8_t> bytes = read_bytes(good.str());
        ASSERT_GT(bytes.size(), 100u);
        bytes.resize(bytes.size() - 100);
        TempPath p("truncated");
        write_bytes(p.str(), bytes);
        const std::string err = load_error(s, p.str());
        ASSERT_FALSE(err.empty()) << "a truncated file loaded";
        bool named = err.find("truncated") != std::string::npos;
        for (const auto& [name, t] : file) named = named || err.find("'" + name + "'") != std::string::npos;
        EXPECT_TRUE(named) << err;
        expect_unchanged("truncated");
    }
    {  // (d) garbage header: the length and the start of the JSON overwritten
        std::vector<uint8_t> bytes = read_bytes(good.str());
        for (size_t i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(0xA5 ^ (i * 37));
        TempPath p("garbage");
        write_bytes(p.str(), bytes);
        const std::string err = load_error(s, p.str());
        ASSERT_FALSE(err.empty()) << "a file with a garbage header loaded";
        EXPECT_NE(err.find(p.str()), std::string::npos) << "the error should name the file: " << err;
        expect_unchanged("garbage header");
    }
    {  // (d') only the JSON garbled, the length intact
        std::vector<uint8_t> bytes = read_bytes(good.str());
        for (size_t i = 8; i < 24; ++i) bytes[i] = '#';
        TempPath p("garbage_json");
        write_bytes(p.str(), bytes);
        const std::string err = load_error(s, p.str());
        ASSERT_FALSE(err.empty()) << "a file with a garbled JSON header loaded";
        expect_unchanged("garbled JSON");
    }
    {  // a file that does not exist
        TempPath p("absent");
        const std::string err = load_error(s, p.str());
        EXPECT_NE(err.find(p.str()), std::string::npos) << err;
        expect_unchanged("absent file");
    }
    // After all that, the good file still loads.
    s.load(good.str());
    EXPECT_EQ(s.step_count(), 6);
    for (const auto& name : names) EXPECT_EQ(s.get(name), file.at(name).to_f32()) << name;
}

// ---- 5. weights-only checkpoints ----------------------------------------------------------------

TEST_F(TrainTest, WeightsOnlyCheckpointLeavesOptimizerStateAsItWas) {
    Problem prob;
    const Optimizer opt = AdamW{.lr = 0.02};
    TempPath full("full");
    {
        Session other = prob.compile_with(opt);
        for (int i = 0; i < 6; ++i) other.step();
        other.save(full.str());
    }
    io::TensorMap weights = io::read_safetensors(full.str());
    for (auto it = weights.begin(); it != weights.end();) {
        it = it->first.rfind("optimizer.", 0) == 0 ? weights.erase(it) : std::next(it);
    }
    ASSERT_EQ(weights.size(), kProblemParams.size());
    TempPath path("weights_only");
    io::write_safetensors(path.str(), weights, io::read_safetensors_metadata(full.str()));

    Session s = prob.compile_with(opt);
    for (int i = 0; i < 3; ++i) s.step();
    std::vector<std::string> states;
    for (const auto& n : adam_persistent_names()) {
        if (n.rfind("optimizer.", 0) == 0) states.push_back(n);
    }
    const auto states_before = snapshot(s, states);
    for (const auto& [name, v] : states_before) {
        bool nonzero = false;
        for (float x : v) nonzero = nonzero || x != 0;
        ASSERT_TRUE(nonzero) << name << " is still zero after 3 steps";
    }
    s.load(path.str());
    for (const auto& name : kProblemParams) EXPECT_EQ(s.get(name), weights.at(name).to_f32()) << name;
    for (const auto& [name, v] : states_before) EXPECT_EQ(s.get(name), v) << name;
    EXPECT_EQ(s.step_count(), 6);
    // And training goes on from there.
    EXPECT_TRUE(std::isfinite(s.step()));
}

}  // namespace
}  // namespace mn::test
