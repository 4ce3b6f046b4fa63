// Image decoding and torchvision's evaluation transform (io/image.hpp) against PyTorch
// (tests/torch/image_transform.py), and the image folder's classes, split and bad input
// (train/image_folder.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "error_of.hpp"
#include "host_tools.hpp"
#include "image_folder.hpp"
#include "io/image.hpp"
#include "io/safetensors.hpp"
#include "temp_dir.hpp"
#include "train/image_folder.hpp"

namespace mn::test {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<double> f64(const io::TensorData& t) {
    EXPECT_EQ(t.dtype, "F64");
    std::vector<double> v(t.bytes.size() / 8);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    return v;
}

// Ours against the float64 computation of the same transform: float32's rounding apart, equal.
// Against torchvision, which rounds PIL's resize to 8 bits after the horizontal pass and again after
// the vertical one (each within half a level, and the vertical pass averages the first rounding with
// weights summing to 1): within one level of 255, in each channel's normalized units.
TEST(ImageTransform, MatchesTorchvision) {
    MN_REQUIRE_TORCH();
    TempDir dir("image-transform");
    int status = 0;
    const std::string out = run_command("cd " + source_dir() + "/tests/torch && " + reference_python() + " "
                                        "image_transform.py " + dir.path(""), &status);
    ASSERT_EQ(status, 0) << out;
    const io::TensorMap expected = io::read_safetensors(dir.path("expected.safetensors"));
    const io::ImageTransform imagenet;
    size_t checked = 0;
    for (const char* name : {"wide", "tall", "small", "grey", "alpha"}) {
        const io::Image image = io::read_image(dir.path(std::string(name) + ".png"));
        for (const auto [resize, crop] : {std::pair{36, 32}, {16, 14}, {19, 17}, {100, 100}, {256, 224}}) {
            const std::string key = std::string(name) + "." + std::to_string(resize) + "." + std::to_string(crop);
            SCOPED_TRACE(key);
            std::vector<float> got(size_t(3 * crop * crop));
            io::preprocess(image, {.resize = resize, .crop = crop}, got.data());
            const std::vector<double> hand = f64(expected.at(key + ".hand")), tv = f64(expected.at(key + ".torchvision"));
            ASSERT_EQ(hand.size(), got.size());
            double worst_hand = 0, worst_levels = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                worst_hand = std::max(worst_hand, std::fabs(got[i] - hand[i]));
                worst_levels = std::max(worst_levels, std::fabs(got[i] - tv[i]) * imagenet.std[i / size_t(crop * crop)] * 255);
            }
            EXPECT_LE(worst_hand, 1e-6);
            EXPECT_LE(worst_levels, 1.001);
            ++checked;
        }
    }
    EXPECT_EQ(checked, 25u);

    // The training transform's regions, resized to 32 square, some flipped: torchvision's resized_crop
    // crops first, so no tap reads outside the region (which torch's interpolate of the cut also does).
    const io::ImageTransform t32{.resize = 32, .crop = 32};
    checked = 0;
    for (const char* name : {"wide", "tall"}) {
        const io::Image image = io::read_image(dir.path(std::string(name) + ".png"));
        for (const io::Augmentation a : {io::Augmentation{3, 5, 40, 30, false}, {0, 0, 61, 83, true}, {10, 20, 17, 60, true},
                                         {100, 7, 200, 150, false}}) {
            const std::string key = std::string(name) + "." + std::to_string(a.top) + "." + std::to_string(a.left) + "." +
                                    std::to_string(a.height) + "." + std::to_string(a.width) + "." + std::to_string(a.flip);
            if (a.top + a.height > image.height) continue;  // the script skips it too
            SCOPED_TRACE(key);
            std::vector<float> got(3 * 32 * 32);
            io::augment(image, a, t32, got.data());
            const std::vector<double> hand = f64(expected.at(key + ".hand")), tv = f64(expected.at(key + ".torchvision"));
            double worst_hand = 0, worst_levels = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                worst_hand = std::max(worst_hand, std::fabs(got[i] - hand[i]));
                worst_levels = std::max(worst_levels, std::fabs(got[i] - tv[i]) * imagenet.std[i / (32 * 32)] * 255);
            }
            EXPECT_LE(worst_hand, 1e-6);
            EXPECT_LE(worst_levels, 1.001);
            ++checked;
        }
    }
    EXPECT_EQ(checked, 7u);

    // JPEG: stb_image's decoder against libjpeg's (through PIL). Their inverse DCTs and chroma
    // upsampling round differently, so pixels differ by a few levels, but on average by a small
    // fraction of one; a swapped channel, a flipped image or a wrong colour conversion is off by tens.
    const io::Image ours = io::read_image(dir.path("photo.jpg")), pil = io::read_image(dir.path("photo_pil.png"));
    ASSERT_EQ(ours.height, pil.height);
    ASSERT_EQ(ours.width, pil.width);
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < ours.rgb.size(); ++i) {
        const int d = std::abs(int(ours.rgb[i]) - int(pil.rgb[i]));
        sum += d;
        worst = std::max(worst, d);
    }
    EXPECT_LE(sum / double(ours.rgb.size()), 0.25);
    EXPECT_LE(worst, 4);
}

// torchvision's evaluation sizes: 224 from 256, and the same crop fraction elsewhere.
TEST(ImageTransform, ResizeIsTheCropOver0875) {
    EXPECT_EQ(io::ImageTransform::for_crop(224).resize, 256);
    EXPECT_EQ(io::ImageTransform::for_crop(32).resize, 36);
    const io::Image image{.height = 40, .width = 40, .rgb = std::vector<uint8_t>(40 * 40 * 3, 7)};
    std::vector<float> out(3 * 30 * 30);
    EXPECT_EQ(error_of([&] { io::preprocess(image, {.resize = 20, .crop = 30}, out.data()); }),
              "image transform: the crop 30 must be from 1 to the resize 20");
}

// RandomResizedCrop.get_params' bounds: inside the image, 8% to 100% of its area and a ratio from 3/4
// to 4/3 before the sides are rounded to whole pixels; half the draws flipped; an image too narrow for
// any draw falls back to torchvision's centre.
TEST(ImageTransform, RandomRegionsAreTorchvisionsDraws) {
    std::mt19937_64 rng(11);
    int flipped = 0;
    for (int i = 0; i < 2000; ++i) {
        const io::Augmentation a = io::random_augmentation(300, 201, rng);
        ASSERT_TRUE(a.top >= 0 && a.left >= 0 && a.top + a.height <= 300 && a.left + a.width <= 201) << i;
        const double w = double(a.width), h = double(a.height);  // each within half a pixel of the draw
        EXPECT_GE((w + 0.5) * (h + 0.5), 0.08 * 300 * 201) << i;
        EXPECT_LE((w - 0.5) * (h - 0.5), 300.0 * 201) << i;
        EXPECT_GE((w + 0.5) / (h - 0.5), 3.0 / 4) << i;
        EXPECT_LE((w - 0.5) / (h + 0.5), 4.0 / 3) << i;
        flipped += a.flip;
    }
    EXPECT_NEAR(flipped, 1000, 100);
    // 1000 x 10: every draw of at least 8% of the area is far taller than 10 pixels or too wide.
    const io::Augmentation a = io::random_augmentation(10, 1000, rng);
    EXPECT_EQ(a.height, 10);
    EXPECT_EQ(a.width, 13);  // round(10 * 4 / 3)
    EXPECT_EQ(a.top, 0);
    EXPECT_EQ(a.left, (1000 - 13) / 2);
}

TEST(ImageFolder, ClassesAreSortedAndATenthOfEachIsHeldOut) {
    TempDir dir("image-folder");
    write_image_folder(dir.path("data"), {.classes = {"zebra", "ant", "moth"}, .per_class = 25});
    std::ofstream(dir.path("data/ant/notes.txt")) << "not an image, skipped as ImageFolder skips it\n";
    fs::create_directories(dir.path("data/ant/nested"));
    fs::copy_file(dir.path("data/ant/0.png"), dir.path("data/ant/nested/a.PNG"));
    const train::ImageFolder f = train::open_image_folder(dir.path("data"));
    EXPECT_EQ(f.classes, (std::vector<std::string>{"ant", "moth", "zebra"}));
    EXPECT_EQ(f.eval.size(), 6u);  // 2 of 26 ants, 2 of 25 moths, 2 of 25 zebras
    EXPECT_EQ(f.train.size(), 70u);
    std::set<std::string> seen;
    for (const auto* part : {&f.train, &f.eval})
        for (const train::LabelledImage& image : *part) {
            EXPECT_TRUE(seen.insert(image.path).second) << image.path;
            EXPECT_EQ(fs::path(image.path).parent_path().filename() == "nested" ? "ant"
                                                                              : fs::path(image.path).parent_path().filename().string(),
                      f.classes[size_t(image.label)]);
        }
    // The same split on every opening.
    const train::ImageFolder again = train::open_image_folder(dir.path("data"));
    ASSERT_EQ(again.eval.size(), f.eval.size());
    for (size_t i = 0; i < f.eval.size(); ++i) EXPECT_EQ(again.eval[i].path, f.eval[i].path);
}

TEST(ImageFolder, BadInputIsAClearError) {
    TempDir dir("image-folder");
    const std::string root = dir.path("data");
    fs::create_directories(root);
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }),
              "--data " + root + ": 0 class folders; a classifier needs at least two (one sub-folder of images per class)");
    EXPECT_EQ(error_of([&] { train::open_image_folder(dir.path("none")); }),
              "--data " + dir.path("none") + ": no such folder (one sub-folder of images per class)");
    write_image_folder(root, {.classes = {"cat"}, .per_class = 3});
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }),
              "--data " + root + ": 1 class folder; a classifier needs at least two (one sub-folder of images per class)");
    fs::create_directories(root + "/dog");
    fs::copy_file(root + "/cat/0.png", root + "/dog/0.png");
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }),
              "--data " + root + ": class 'dog' has 1 image (.png .jpg .jpeg .bmp); each class needs at least two, "
              "one to hold out");
    fs::copy_file(root + "/cat/1.png", root + "/dog/1.png");
    EXPECT_EQ(train::open_image_folder(root).classes.size(), 2u);

    std::ofstream(root + "/dog/2.png") << "GIF89a, whatever the name says";
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }),
              root + "/dog/2.png: not an image this build reads (PNG, JPEG, BMP): unknown image type");
    fs::remove(root + "/dog/2.png");
    fs::create_symlink(dir.path("gone.png"), root + "/dog/2.png");
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }),
              root + "/dog/2.png: cannot open: No such file or directory");
    fs::remove(root + "/dog/2.png");

    // A BMP header of width 0, which stb_image accepts and the resize would divide by (found by
    // fuzz_image in a PPM, which this build no longer reads: it is skipped).
    const auto le = [](uint32_t v, int bytes) { std::string s; for (int i = 0; i < bytes; ++i) s += char(v >> (8 * i)); return s; };
    std::ofstream(root + "/dog/2.bmp", std::ios::binary)
        << "BM" << le(14 + 40 + 64, 4) << le(0, 4) << le(54, 4)                   // file header
        << le(40, 4) << le(0, 4) << le(5, 4) << le(1, 2) << le(24, 2) << le(0, 24)  // 0 x 5, 24 bits
        << std::string(64, '\0');
    EXPECT_EQ(error_of([&] { train::open_image_folder(root); }), root + "/dog/2.bmp: an image of 0 x 5 pixels has none");
    fs::remove(root + "/dog/2.bmp");
    std::ofstream(root + "/dog/2.ppm", std::ios::binary) << "P6\n0 5\n255\n";
    EXPECT_EQ(train::open_image_folder(root).classes.size(), 2u);
    fs::remove(root + "/dog/2.ppm");

    // A JPEG Huffman table of more than 256 codes, which Debian's stb_image would write past (found by
    // fuzz_image): 16 counts of 20.
    {
        std::string jpeg = bytes_of(root + "/cat/2.jpg");
        const size_t dht = jpeg.find("\xFF\xC4");
        ASSERT_NE(dht, std::string::npos);
        for (size_t i = 0; i < 16; ++i) jpeg[dht + 5 + i] = 20;
        std::ofstream(root + "/dog/2.jpg", std::ios::binary) << jpeg;
        EXPECT_EQ(error_of([&] { io::read_image(root + "/dog/2.jpg"); }),
                  root + "/dog/2.jpg: cannot decode: a JPEG Huffman table of 320 codes at byte " + std::to_string(dht + 4) +
                      " (at most 256)");
        fs::remove(root + "/dog/2.jpg");
    }

    // A PNG chunk claiming 2 GiB, which stb_image would reserve before finding the file short (found by
    // fuzz_image).
    {
        std::string big = bytes_of(root + "/cat/1.png");
        const size_t idat = big.find("IDAT") - 4;
        big.replace(idat, 4, "\x7f\xff\xff\xff");
        std::ofstream(root + "/dog/2.png", std::ios::binary) << big;
        EXPECT_EQ(error_of([&] { io::read_image(root + "/dog/2.png"); }),
                  root + "/dog/2.png: cannot decode: its PNG chunk 'IDAT' at byte " + std::to_string(idat) +
                      " of 2147483647 bytes runs past the end of the file (" + std::to_string(big.size()) + " bytes)");
        fs::remove(root + "/dog/2.png");
    }

    // A header intact, the body cut short: found when it is decoded.
    const std::string png = bytes_of(root + "/cat/1.png");
    std::ofstream(root + "/dog/2.png", std::ios::binary) << png.substr(0, png.size() / 2);
    EXPECT_EQ(train::open_image_folder(root).classes.size(), 2u);
    EXPECT_EQ(error_of([&] { io::read_image(root + "/dog/2.png"); }).rfind(root + "/dog/2.png: cannot decode: ", 0), 0u)
        << error_of([&] { io::read_image(root + "/dog/2.png"); });
}

}  // namespace
}  // namespace mn::test
