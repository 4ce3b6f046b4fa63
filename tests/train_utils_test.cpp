// Trainer utilities: dataset loading and its errors, shuffled batching (coverage, determinism,
// resumption), evaluation padding, progress output volume, and the loss curve's CSV and SVG.
// The Fashion-MNIST tests run against the installed dataset and skip without it; the error
// tests write small gzip IDX files of their own, so they always run.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "temp_dir.hpp"
#include "meganeura/error.hpp"
#include "train/curve.hpp"
#include "train/dataset.hpp"
#include "train/progress.hpp"

namespace fs = std::filesystem;
using mn::train::BatchIterator;
using mn::train::Dataset;
using mn::train::LossCurve;
using mn::train::Progress;

namespace {

const char* const kFashionDir = "/usr/share/datasets/fashion-mnist";

class TrainUtilsTest : public ::testing::Test {
protected:
    std::string path(const std::string& name) const { return tmp_.path(name); }

    // A gzip IDX file of unsigned bytes with the given shape.
    void write_idx(const std::string& name, const std::vector<uint32_t>& shape, const std::vector<uint8_t>& data) {
        std::vector<uint8_t> bytes = {0, 0, 0x08, uint8_t(shape.size())};
        for (uint32_t d : shape)
            for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(d >> shift));
        bytes.insert(bytes.end(), data.begin(), data.end());
        gzFile file = gzopen(path(name).c_str(), "wb");
        ASSERT_NE(file, nullptr);
        ASSERT_EQ(gzwrite(file, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
        gzclose(file);
    }

    // A fake "test" split: `images` 28x28 images of value 255, and the given labels.
    void write_split(uint32_t images, const std::vector<uint8_t>& labels) {
        write_idx("t10k-images-idx3-ubyte.gz", {images, 28, 28}, std::vector<uint8_t>(images * 784, 255));
        write_idx("t10k-labels-idx1-ubyte.gz", {uint32_t(labels.size())}, labels);
    }

    std::string load_error(const std::string& dir) {
        try {
            mn::train::load_fashion_mnist("test", dir);
        } catch (const mn::Error& error) {
            return error.what();
        }
        ADD_FAILURE() << "expected mn::Error loading from " << dir;
        return "";
    }

    mn::test::TempDir tmp_{"train-utils"};
};

// count examples of two features; example i holds (i, i + 0.5) and label i % 10.
Dataset small_dataset(int64_t count) {
    Dataset data;
    data.count = count;
    data.features = 2;
    for (int64_t i = 0; i < count; ++i) {
        data.images.insert(data.images.end(), {float(i), float(i) + 0.5f});
        data.labels.push_back(int32_t(i % 10));
    }
    return data;
}

// The example indices of one batch of small_dataset, checking that features and labels agree.
std::vector<int64_t> indices(const std::vector<float>& x, const std::vector<int32_t>& y) {
    std::vector<int64_t> out;
    for (size_t r = 0; r < y.size(); ++r) {
        const auto index = int64_t(x[2 * r]);
        EXPECT_EQ(x[2 * r + 1], float(index) + 0.5f);
        EXPECT_EQ(y[r], index % 10);
        out.push_back(index);
    }
    return out;
}

// Every index the iterator yields for the rest of its epoch, batch by batch.
std::vector<std::vector<int64_t>> drain(BatchIterator& it) {
    std::vector<std::vector<int64_t>> batches;
    std::vector<float> x;
    std::vector<int32_t> y;
    while (it.next(x, y)) batches.push_back(indices(x, y));
    return batches;
}

std::string read_text(const std::string& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string read_stream(std::FILE* file) {
    std::rewind(file);
    std::string text;
    for (int c; (c = std::fgetc(file)) != EOF;) text += char(c);
    return text;
}

// A small XML well-formedness check: tags nest and close, one root element, no stray '<' or '&'.
// Returns the names of all elements opened, in order, or an error message starting with "!".
std::vector<std::string> xml_elements(const std::string& text) {
    std::vector<std::string> opened, stack;
    size_t roots = 0;
    for (size_t i = 0; i < text.size();) {
        if (text[i] == '&') {
            const size_t semi = text.find(';', i);
            const std::string entity = text.substr(i, semi == std::string::npos ? 1 : semi - i + 1);
            if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;")
                return {"!bad entity at " + std::to_string(i)};
            i += entity.size();
            continue;
        }
        if (text[i] != '<') {
            if (stack.empty() && !std::isspace((unsigned char)text[i])) return {"!text outside the root"};
            ++i;
            continue;
        }
        const size_t close = text.find('>', i);
        if (close == std::string::npos) return {"!unterminated tag"};
        std::string tag = text.substr(i + 1, close - i - 1);
        i = close + 1;
        if (tag.find('<') != std::string::npos) return {"!'<' inside a tag"};
        if (tag[0] == '/') {
            if (stack.empty() || stack.back() != tag.substr(1)) return {"!mismatched </" + tag.substr(1) + ">"};
            stack.pop_back();
            continue;
        }
        const bool self_closing = tag.back() == '/';
        const std::string name = tag.substr(0, tag.find_first_of(" /"));
        if (stack.empty()) ++roots;
        opened.push_back(name);
        if (!self_closing) stack.push_back(name);
    }
    if (!stack.empty()) return {"!unclosed <" + stack.back() + ">"};
    if (roots != 1) return {"!" + std::to_string(roots) + " root elements"};
    return opened;
}

// The coordinate pairs of every polyline in an SVG.
std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& svg) {
    std::vector<std::vector<std::pair<double, double>>> lines;
    for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
        const size_t begin = svg.find("points=\"", at) + 8, end = svg.find('"', begin);
        std::istringstream points(svg.substr(begin, end - begin));
        lines.emplace_back();
        double x, y;
        char comma;
        while (points >> x >> comma >> y) lines.back().emplace_back(x, y);
    }
    return lines;
}

int count_of(const std::string& text, char c) { return int(std::count(text.begin(), text.end(), c)); }

// ---------------------------------------------------------------- datasets

TEST_F(TrainUtilsTest, LoadsFashionMnist) {
    if (!fs::is_directory(kFashionDir)) GTEST_SKIP() << kFashionDir << " is not installed";
    for (const auto& [split, count] : {std::pair{"train", 60000}, std::pair{"test", 10000}}) {
        const Dataset data = mn::train::load_fashion_mnist(split, kFashionDir);
        EXPECT_EQ(data.count, count) << split;
        EXPECT_EQ(data.features, 784);
        ASSERT_EQ(data.images.size(), size_t(count) * 784);
        ASSERT_EQ(data.labels.size(), size_t(count));
        const auto [lo, hi] = std::minmax_element(data.images.begin(), data.images.end());
        EXPECT_EQ(*lo, 0.0f);
        EXPECT_EQ(*hi, 1.0f);
        std::vector<int> per_class(10);
        for (int32_t label : data.labels) {
            ASSERT_GE(label, 0);
            ASSERT_LE(label, 9);
            ++per_class[label];
        }
        for (int n : per_class) EXPECT_EQ(n, count / 10) << split;  // Fashion-MNIST is balanced
    }
}

TEST_F(TrainUtilsTest, DefaultDirectoryFollowsEnvironment) {
    setenv("MEGANEURA_DATA_DIR", "/data/here", 1);
    EXPECT_EQ(mn::train::default_fashion_mnist_dir(), "/data/here/fashion-mnist");
    unsetenv("MEGANEURA_DATA_DIR");
    EXPECT_EQ(mn::train::default_fashion_mnist_dir(), kFashionDir);
}

TEST_F(TrainUtilsTest, LoadsASmallSplit) {
    write_split(3, {0, 9, 4});
    const Dataset data = mn::train::load_fashion_mnist("test", tmp_.dir().string());
    EXPECT_EQ(data.count, 3);
    EXPECT_EQ(data.features, 784);
    EXPECT_EQ(data.labels, (std::vector<int32_t>{0, 9, 4}));
    EXPECT_TRUE(std::all_of(data.images.begin(), data.images.end(), [](float v) { return v == 1.0f; }));
}

TEST_F(TrainUtilsTest, LoadErrorsNameThePathAndTheFix) {
    const std::string missing = path("nowhere");
    std::string message = load_error(missing);
    EXPECT_NE(message.find(missing), std::string::npos) << message;
    EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;

    write_idx("t10k-images-idx3-ubyte.gz", {2, 28, 28}, std::vector<uint8_t>(2 * 784));
    message = load_error(tmp_.dir().string());
    EXPECT_NE(message.find(path("t10k-labels-idx1-ubyte.gz")), std::string::npos) << message;
    EXPECT_NE(message.find("make setup"), std::string::npos) << message;

    write_split(3, {1, 2});
    message = load_error(tmp_.dir().string());
    EXPECT_NE(message.find("3 images but"), std::string::npos) << message;
    EXPECT_NE(message.find("2 labels"), std::string::npos) << message;

    write_split(2, {1, 10});
    message = load_error(tmp_.dir().string());
    EXPECT_NE(message.find("label 10 at index 1"), std::string::npos) << message;

    std::ofstream(path("t10k-labels-idx1-ubyte.gz")) << "garbage";
    message = load_error(tmp_.dir().string());
    EXPECT_NE(message.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << message;
    EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;

    EXPECT_THROW(mn::train::load_fashion_mnist("validation", tmp_.dir().string()), mn::Error);
}

// ---------------------------------------------------------------- batching

TEST(BatchIterator, CoversEveryIndexOncePerEpoch) {
    const Dataset data = small_dataset(103);
    BatchIterator it(data, 10, 7, 0, /*drop_last=*/false);
    EXPECT_EQ(it.batches_per_epoch(), 11);
    const auto batches = drain(it);
    ASSERT_EQ(batches.size(), 11u);
    EXPECT_EQ(batches.back().size(), 3u);
    std::vector<int64_t> seen;
    for (const auto& batch : batches) seen.insert(seen.end(), batch.begin(), batch.end());
    EXPECT_EQ(seen, it.order());
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(103);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all);
    EXPECT_NE(it.order(), all);  // actually shuffled
}

TEST(BatchIterator, DropLastSkipsTheShortBatch) {
    const Dataset data = small_dataset(103);
    BatchIterator it(data, 10, 7);
    EXPECT_EQ(it.batches_per_epoch(), 10);
    const auto batches = drain(it);
    ASSERT_EQ(batches.size(), 10u);
    std::set<int64_t> seen;
    for (const auto& batch : batches) {
        EXPECT_EQ(batch.size(), 10u);
        seen.insert(batch.begin(), batch.end());
    }
    EXPECT_EQ(seen.size(), 100u);
    for (int64_t i = 100; i < 103; ++i) EXPECT_EQ(seen.count(it.order()[i]), 0u);

    std::vector<float> x = {42};
    std::vector<int32_t> y = {42};
    EXPECT_FALSE(it.next(x, y));  // exhausted; leaves the vectors alone
    EXPECT_EQ(x, std::vector<float>{42});
    it.seek(1);
    EXPECT_EQ(drain(it).size(), 10u);

    EXPECT_THROW(BatchIterator(data, 104, 7), mn::Error);
    EXPECT_NO_THROW(BatchIterator(data, 104, 7, 0, false));
    EXPECT_THROW(BatchIterator(data, 0, 7), mn::Error);
}

TEST(BatchIterator, OrderIsAFunctionOfSeedAndEpoch) {
    EXPECT_EQ(BatchIterator::permutation(1000, 5, 3), BatchIterator::permutation(1000, 5, 3));
    EXPECT_NE(BatchIterator::permutation(1000, 5, 3), BatchIterator::permutation(1000, 5, 4));
    EXPECT_NE(BatchIterator::permutation(1000, 5, 3), BatchIterator::permutation(1000, 6, 3));
    // Pinned, so that a change to the shuffle (which would break resuming old runs) is noticed.
    EXPECT_EQ(BatchIterator::permutation(10, 42, 0), (std::vector<int64_t>{6, 8, 1, 9, 0, 2, 5, 7, 3, 4}));

    const Dataset data = small_dataset(50);
    BatchIterator a(data, 8, 11), b(data, 8, 11, 2);
    drain(a);
    a.seek(1);
    drain(a);
    a.seek(2);
    EXPECT_EQ(a.order(), b.order());
    EXPECT_EQ(drain(a), drain(b));
}

TEST(BatchIterator, ResumesMidEpoch) {
    const Dataset data = small_dataset(50);
    BatchIterator full(data, 8, 3, 4), resumed(data, 8, 3);
    resumed.seek(4, 2);
    const auto all = drain(full), rest = drain(resumed);
    ASSERT_EQ(all.size(), 6u);
    EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 2, all.end()));
    EXPECT_THROW(resumed.seek(0, 7), mn::Error);
}

TEST(FillBatch, PadsTheFinalBatch) {
    const Dataset data = small_dataset(10);
    std::vector<float> x;
    std::vector<int32_t> y;
    EXPECT_EQ(mn::train::fill_batch(data, 4, 4, x, y), 4);
    EXPECT_EQ(indices(x, y), (std::vector<int64_t>{4, 5, 6, 7}));

    EXPECT_EQ(mn::train::fill_batch(data, 8, 4, x, y), 2);
    EXPECT_EQ(x, (std::vector<float>{8, 8.5f, 9, 9.5f, 0, 0, 0, 0}));
    EXPECT_EQ(y, (std::vector<int32_t>{8, 9, 0, 0}));

    EXPECT_EQ(mn::train::fill_batch(data, 10, 4, x, y), 0);
    EXPECT_EQ(x, std::vector<float>(8, 0.0f));
    EXPECT_THROW(mn::train::fill_batch(data, 11, 4, x, y), mn::Error);
    EXPECT_THROW(mn::train::fill_batch(data, -1, 4, x, y), mn::Error);
}

// ---------------------------------------------------------------- progress

TEST(ProgressTest, LogOutputIsBounded) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    {
        Progress progress("train", 10000, out);  // a tmpfile is not a terminal: plain lines
        for (int64_t step = 1; step <= 10000; ++step) progress.update(step, 2.0);
        EXPECT_DOUBLE_EQ(progress.smoothed_loss(), 2.0);
        progress.finish();
    }
    const std::string text = read_stream(out);
    std::fclose(out);
    EXPECT_EQ(count_of(text, '\r'), 0);
    EXPECT_GE(count_of(text, '\n'), 11) << text;  // the first step, each tenth, the summary
    EXPECT_LE(count_of(text, '\n'), 12) << text;
    EXPECT_NE(text.find("train: 100%  10000/10000"), std::string::npos) << text;
    EXPECT_NE(text.find("train: done, 10000 steps in"), std::string::npos) << text;
    EXPECT_NE(text.find("loss 2"), std::string::npos) << text;
}

TEST(ProgressTest, ResumedRunCountsItsOwnSteps) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    Progress progress("train", 1000, out, Progress::Style::Lines);
    for (int64_t step = 901; step <= 1000; ++step) progress.update(step, 1.0);
    progress.finish();
    progress.finish();  // idempotent
    const std::string text = read_stream(out);
    std::fclose(out);
    EXPECT_EQ(count_of(text, '\n'), 3) << text;  // step 901, step 1000, the summary
    EXPECT_NE(text.find("done, 100 steps"), std::string::npos) << text;
}

TEST(ProgressTest, BarRedrawsInPlaceAndRarely) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    const auto start = std::chrono::steady_clock::now();
    {
        Progress progress("eval", 100000, out, Progress::Style::Bar);
        for (int64_t step = 1; step <= 100000; ++step) progress.update(step, step % 2 ? 1.0 : 3.0);
        EXPECT_NEAR(progress.smoothed_loss(), 2.0, 0.1);
        progress.finish();
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string text = read_stream(out);
    std::fclose(out);
    EXPECT_EQ(count_of(text, '\n'), 1) << text;  // only the summary ends a line
    EXPECT_LE(count_of(text, '\r'), 3 + int(elapsed * 10)) << text;
    EXPECT_NE(text.find("eval [####################] 100%"), std::string::npos) << text;
    EXPECT_NE(text.find("\reval: done, 100000 steps"), std::string::npos) << text;
}

TEST(ProgressTest, UnfinishedBarEndsItsLine) {
    std::FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    {
        Progress progress("train", 10, out, Progress::Style::Bar);
        progress.update(1, 1.0);
    }
    const std::string text = read_stream(out);
    std::fclose(out);
    EXPECT_EQ(text.front(), '\r');
    EXPECT_EQ(text.back(), '\n');
    EXPECT_NE(text.find("10%  1/10"), std::string::npos) << text;
}

// ---------------------------------------------------------------- loss curve

TEST_F(TrainUtilsTest, CurveCsvIsExact) {
    LossCurve curve;
    curve.add(2, 0.1f);
    curve.add(1, 3.0f);
    curve.add(1, 2.5f);  // replaces
    curve.add_eval(2, 0.75f);
    curve.add_eval(3, 0.8125f);
    curve.write_csv(path("curve.csv"));
    EXPECT_EQ(read_text(path("curve.csv")), "step,loss,eval_accuracy\n1,2.5,\n2,0.1,0.75\n3,,0.8125\n");
    EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(tmp_.dir()), {}), std::vector<fs::path>{tmp_.dir() / "curve.csv"});

    const LossCurve back = LossCurve::read_csv(path("curve.csv"));
    back.write_csv(path("again.csv"));
    EXPECT_EQ(read_text(path("again.csv")), read_text(path("curve.csv")));
    EXPECT_FALSE(back.rows().at(3).loss.has_value());
    EXPECT_EQ(back.rows().at(3).accuracy, 0.8125f);
}

TEST_F(TrainUtilsTest, CurveCsvErrors) {
    std::ofstream(path("bad.csv")) << "step,loss,eval_accuracy\n1,2.5,\n2,x,\n";
    try {
        LossCurve::read_csv(path("bad.csv"));
        ADD_FAILURE() << "expected mn::Error";
    } catch (const mn::Error& error) {
        EXPECT_NE(std::string(error.what()).find(path("bad.csv") + ":3"), std::string::npos) << error.what();
    }
    std::ofstream(path("header.csv")) << "step,loss\n1,2\n";
    EXPECT_THROW(LossCurve::read_csv(path("header.csv")), mn::Error);
    EXPECT_THROW(LossCurve::read_csv(path("missing.csv")), mn::Error);
    EXPECT_THROW(LossCurve().write_csv(path("no/such/dir.csv")), mn::Error);
}

// The plot's frame, as curve.cpp draws it: x from 70 to 730, y from 60 (top) to 390.
constexpr double kFrameLeft = 70, kFrameRight = 730, kFrameTop = 60, kFrameBottom = 390;

// The centres of every <circle> in an SVG, the legend's marker included.
std::vector<std::pair<double, double>> circles(const std::string& svg) {
    std::vector<std::pair<double, double>> centres;
    for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
        const size_t cx = svg.find("cx=\"", at) + 4, cy = svg.find("cy=\"", at) + 4;
        centres.emplace_back(std::stod(svg.substr(cx)), std::stod(svg.substr(cy)));
    }
    return centres;
}

// The sum of |y[i+1] - y[i]| along a polyline: how much it wiggles.
double variation(const std::vector<std::pair<double, double>>& line) {
    double total = 0;
    for (size_t i = 1; i < line.size(); ++i) total += std::abs(line[i].second - line[i - 1].second);
    return total;
}

TEST_F(TrainUtilsTest, CurveSvgIsAWellFormedPlot) {
    LossCurve curve;
    for (int64_t step = 1; step <= 10000; ++step)
        curve.add(step, float(2.3 * std::exp(-step / 3000.0) + 0.1 * std::sin(step)));
    curve.add(5000, NAN);  // left out, not drawn as "nan"
    for (int64_t step = 1000; step <= 10000; step += 1000) curve.add_eval(step, 0.7f + step * 2e-5f);
    curve.write_svg(path("curve.svg"), "Fashion-MNIST <MLP> & friends");
    const std::string svg = read_text(path("curve.svg"));

    ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
    ASSERT_EQ(svg.substr(svg.find_last_not_of(" \n") - 5, 6), "</svg>");
    const std::vector<std::string> elements = xml_elements(svg);
    ASSERT_FALSE(elements.empty());
    ASSERT_NE(elements[0][0], '!') << elements[0];
    EXPECT_EQ(elements[0], "svg");
    EXPECT_NE(svg.find("Fashion-MNIST &lt;MLP&gt; &amp; friends"), std::string::npos);
    for (const char* legend : {"loss per step", "loss, moving average", "test accuracy (right axis)"})
        EXPECT_NE(svg.find(legend), std::string::npos) << legend;
    EXPECT_EQ(svg.find("nan"), std::string::npos);
    EXPECT_GE(std::count(elements.begin(), elements.end(), "text"), 8);  // title, tick labels

    const auto lines = polylines(svg);  // the loss per step, its moving average, the accuracy
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_GT(lines[0].size(), 1000u);
    EXPECT_LE(lines[0].size(), 2000u);
    EXPECT_EQ(lines[1].size(), lines[0].size());
    EXPECT_LT(variation(lines[1]), variation(lines[0]) / 4);  // the average smooths the noise
    EXPECT_EQ(lines[2].size(), 10u);
    for (const auto& line : lines)
        for (const auto& [x, y] : line) {
            EXPECT_GE(x, kFrameLeft);
            EXPECT_LE(x, kFrameRight);
            EXPECT_GE(y, kFrameTop);
            EXPECT_LE(y, kFrameBottom);
        }
    EXPECT_GT(lines[0].back().second, lines[0].front().second);  // falling loss: y grows downward

    // Every evaluation is a marker, on an axis from 0 to 1: accuracy a sits at a of the frame's height.
    const auto markers = circles(svg);
    ASSERT_EQ(markers.size(), 10u + 1);  // and the legend's
    for (int i = 0; i < 10; ++i) {
        const double accuracy = 0.7 + (i + 1) * 1000 * 2e-5;
        EXPECT_NEAR(markers[i].second, kFrameBottom - accuracy * (kFrameBottom - kFrameTop), 0.1);
        EXPECT_EQ(markers[i], lines[2][i]);
    }
}

// After one epoch the accuracy was a one-point polyline that drew nothing, on an axis up to 1.4;
// after two, the axis zoomed to 0.845-0.865, so 1.5 points looked like a cliff.
TEST_F(TrainUtilsTest, CurveSvgShowsAccuracyTruthfully) {
    LossCurve one;
    for (int64_t step = 1; step <= 100; ++step) one.add(step, 1.0f / float(step));
    one.add_eval(100, 0.85f);
    one.write_svg(path("one.svg"));
    const auto marker = circles(read_text(path("one.svg")));
    ASSERT_EQ(marker.size(), 2u);
    EXPECT_NEAR(marker[0].second, kFrameBottom - 0.85 * (kFrameBottom - kFrameTop), 0.1);

    LossCurve two = one;
    two.add_eval(200, 0.865f);
    two.write_svg(path("two.svg"));
    const auto markers = circles(read_text(path("two.svg")));
    ASSERT_EQ(markers.size(), 3u);
    EXPECT_NEAR(markers[0].second - markers[1].second, 0.015 * (kFrameBottom - kFrameTop), 0.1);  // 5 pixels
}

TEST_F(TrainUtilsTest, CurveSvgWithoutData) {
    LossCurve().write_svg(path("empty.svg"));
    const std::string svg = read_text(path("empty.svg"));
    const std::vector<std::string> elements = xml_elements(svg);
    ASSERT_FALSE(elements.empty());
    EXPECT_EQ(elements[0], "svg");
    EXPECT_EQ(svg.find("<polyline"), std::string::npos);
    EXPECT_NE(svg.find("no data"), std::string::npos);
}

}  // namespace
