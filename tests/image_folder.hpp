#pragma once
// Tiny image folders for the tests of image decoding and fine-tuning: ROOT/<class>/<n>.png|.jpg,
// noisy images of a few odd sizes whose class is their dominant colour, so a small network separates
// them in a few epochs; written with stb_image_write (Debian's libstb-dev, as the decoder).
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace mn::test {

struct FolderSpec {
    std::vector<std::string> classes = {"blue", "green", "red"};  // class c is bright in channel 2 - c
    int per_class = 12;
    uint64_t seed = 1;
};

// Image i of a class is a PNG, every third a JPEG; sizes vary from 36 to 60 pixels on each side.
inline void write_image_folder(const std::string& root, const FolderSpec& spec) {
    std::mt19937_64 rng(spec.seed);
    std::uniform_int_distribution<int> side(36, 60), noise(0, 120);
    for (size_t c = 0; c < spec.classes.size(); ++c) {
        const std::filesystem::path dir = std::filesystem::path(root) / spec.classes[c];
        std::filesystem::create_directories(dir);
        for (int i = 0; i < spec.per_class; ++i) {
            const int h = side(rng), w = side(rng);
            std::vector<uint8_t> rgb(size_t(h) * size_t(w) * 3);
            for (size_t p = 0; p < rgb.size(); ++p) rgb[p] = uint8_t(noise(rng) + (p % 3 == 2 - c % 3 ? 120 : 0));
            const std::string name = (dir / std::to_string(i)).string();
            if (i % 3 == 2) stbi_write_jpg((name + ".jpg").c_str(), w, h, 3, rgb.data(), 90);
            else stbi_write_png((name + ".png").c_str(), w, h, 3, rgb.data(), w * 3);
        }
    }
}

}  // namespace mn::test
