#pragma once
// Images for vision models, prepared as torchvision's ImageNet transforms prepare a PIL image: for
// evaluation Resize(shorter side), CenterCrop, ToTensor, Normalize(mean, std); for training
// RandomResizedCrop and RandomHorizontalFlip in place of the first two.
//
// Decoding is stb_image (Debian's libstb-dev; its code is compiled into image.cpp alone, PNG, JPEG
// and BMP only: its PPM/PGM reader overruns its buffer on 16-bit grey, fuzz_image found), converted to 8-bit RGB as PIL's convert("RGB") does: grey replicated,
// alpha dropped. The resize is PIL's bilinear, not a textbook one: when it shrinks, the triangle
// filter widens by the scale factor (an antialiased resize), so a 1000-pixel photo resized to 256
// averages every source pixel rather than sampling a quarter of them; models trained with
// torchvision saw that. It is computed in float here, without PIL's rounding to 8 bits after each
// of its two passes, so the two differ by at most one level of 255 (tests/image_test.cpp).
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mn::io {

struct Image {
    int64_t height = 0, width = 0;
    std::vector<uint8_t> rgb;  // height * width * 3, row-major, the channels interleaved
};

// An mn::Error naming the file and the reason: it cannot be opened, is no image stb_image reads, is
// truncated or corrupt, has no pixels, or more than PIL opens (its decompression-bomb limit).
Image read_image(const std::string& path);
// What read_image checks before decoding (the file opens, the header is an image's, the size), from
// the file's first MiB where the header is there, for a quick look over a whole dataset; a corrupt
// body is found by read_image.
void check_image(const std::string& path);

struct ImageTransform {
    int64_t resize = 256;  // the shorter side after resizing
    int64_t crop = 224;    // the side of the centered square cut out of it; at most `resize`
    std::array<double, 3> mean = {0.485, 0.456, 0.406}, std = {0.229, 0.224, 0.225};  // ImageNet's, per channel

    // torchvision's evaluation sizes for a crop: the shorter side resized to crop / 0.875 (256 for 224).
    static ImageTransform for_crop(int64_t crop) { return {.resize = crop * 256 / 224, .crop = crop}; }
};

// Writes the transformed image to `out`: 3 * crop * crop floats, channel-major ([3, crop, crop]),
// each (value / 255 - mean) / std.
void preprocess(const Image& image, const ImageTransform& transform, float* out);

// torchvision's training transform instead of Resize and CenterCrop: RandomResizedCrop(crop), a region
// of 8% to 100% of the image's area with an aspect ratio from 3/4 to 4/3 resized to crop x crop, then
// RandomHorizontalFlip.
struct Augmentation {
    int64_t top = 0, left = 0, height = 0, width = 0;  // the region of the image
    bool flip = false;                                 // mirrored left to right
};
// RandomResizedCrop.get_params (ten draws, then its central fallback) and the flip's coin, from `rng`.
Augmentation random_augmentation(int64_t height, int64_t width, std::mt19937_64& rng);
// Writes the region, resized to transform.crop square and maybe flipped, as preprocess does.
void augment(const Image& image, const Augmentation& augmentation, const ImageTransform& transform, float* out);

}  // namespace mn::io
