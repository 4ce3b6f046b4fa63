// libFuzzer target: any bytes as an image file (PNG, JPEG, BMP), decoded, then through the
// evaluation transform and a random training one. Decoding must end in an image of the size it
// states or an mn::Error, and every value the transforms write must be finite.
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "fuzz_input.hpp"
#include "io/image.hpp"
#include "meganeura/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const mn::fuzz::MemoryFile file(data, size);
    try {
        const mn::io::Image image = mn::io::read_image(file.path());
        if (image.height < 1 || image.width < 1 || image.rgb.size() != size_t(image.height * image.width * 3)) std::abort();
        const mn::io::ImageTransform t = mn::io::ImageTransform::for_crop(8);
        std::vector<float> out(3 * 8 * 8);
        mn::io::preprocess(image, t, out.data());
        for (float v : out)
            if (!std::isfinite(v)) std::abort();
        std::mt19937_64 rng(size);
        mn::io::augment(image, mn::io::random_augmentation(image.height, image.width, rng), t, out.data());
        for (float v : out)
            if (!std::isfinite(v)) std::abort();
    } catch (const mn::Error&) {
    }
    return 0;
}
