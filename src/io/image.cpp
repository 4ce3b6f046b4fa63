// Decoding with stb_image, and torchvision's evaluation transform (image.hpp says which and why).
//
// The resize follows Pillow's ImagingResample (libImaging/Resample.c, precompute_coeffs) step for
// step: for output pixel i the source centre is (i + 0.5) * scale, the triangle filter's support is
// scale wide when shrinking (1 when enlarging), the taps are the source pixels within it, and their
// weights are normalized to sum to 1 (which also handles the borders). Horizontal pass first, then
// vertical, as Pillow; only the rows and columns the crop keeps are computed.
#include "io/image.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "meganeura/error.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
// Debian's stb_image (2.27) decodes a scan with a Huffman table that a corrupt JPEG never defined, from
// the decoder's malloc'ed state, and that garbage indexes past the table's symbols (fuzz_image found it;
// 2.28 checks). Zeroed, an undefined table decodes every code as symbol 0 and consumes no bits: a wrong
// picture from a corrupt file, never a read out of bounds.
#define STBI_MALLOC(size) std::calloc(1, size)
#define STBI_REALLOC(p, size) std::realloc(p, size)
#define STBI_FREE(p) std::free(p)
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
// Debian's stb_image (2.27) lets a corrupt JPEG's bit count go negative while it refills its bit buffer, and then
// shifts by more than 31 (fuzz_image found it; 2.28 stops where the bits run out). On every target we build for the
// shift keeps its low five bits: wrong bits from a corrupt file, never memory outside stb's buffers, which
// AddressSanitizer still watches. So UndefinedBehaviorSanitizer's shift check stays off for stb's functions only
// (the corpus keeps the file: jpeg_negative_bit_count.jpg).
#ifdef __clang__
#pragma clang attribute push(__attribute__((no_sanitize("shift"))), apply_to = function)
#endif
#include <stb/stb_image.h>
#ifdef __clang__
#pragma clang attribute pop
#endif
#pragma GCC diagnostic pop

namespace mn::io {
namespace {

// PIL's Image.MAX_IMAGE_PIXELS doubled: where PIL refuses an image as a decompression bomb.
constexpr int64_t kMaxPixels = 2 * 89478485;

// Debian's stb_image (2.27) builds a JPEG Huffman table without checking that its 16 code counts sum
// to at most 256, and writes past the table when they do (fuzz_image found it; later stb versions
// check). stb reads a table set right after a marker 0xFF 0xC4, so the simulation of its DHT parse
// starts at every such pair in the file, markers or not: a pair inside other data can only make this
// stricter than stb, never laxer.
void check_jpeg_huffman_tables(const std::vector<uint8_t>& b, const std::string& path) {
    // A JPEG to stb: its start-of-image marker, 0xFF 0xD8, any number of 0xFF fill bytes before the D8.
    size_t soi = 0;
    while (soi < b.size() && b[soi] == 0xFF) ++soi;
    if (soi == 0 || soi == b.size() || b[soi] != 0xD8) return;
    for (size_t marker = 0; marker + 4 <= b.size(); ++marker) {
        if (b[marker] != 0xFF || b[marker + 1] != 0xC4) continue;
        int64_t left = int64_t(b[marker + 2]) << 8 | b[marker + 3];  // stb's L: the length, less its 2 bytes
        left -= 2;
        // stb reads zeros past the end of the file, which make empty tables.
        const auto byte = [&](size_t at) { return at < b.size() ? b[at] : uint8_t{0}; };
        for (size_t at = marker + 4; left > 0 && at < b.size();) {
            if (b[at] >> 4 > 1 || (b[at] & 15) > 3) break;  // stb stops there ("bad DHT header")
            int64_t codes = 0;
            for (size_t i = 1; i <= 16; ++i) codes += byte(at + i);
            if (codes > 256)
                throw Error(path + ": cannot decode: a JPEG Huffman table of " + std::to_string(codes) +
                            " codes at byte " + std::to_string(at) + " (at most 256)");
            at += 17 + size_t(codes);
            left -= 17 + codes;
        }
    }
}

// stb_image reserves a PNG's IDAT chunk at the length its header states before reading it, so a file
// of a few bytes can ask for gigabytes (fuzz_image found it). A chunk must fit in the file (`b`, all
// of it): the walk stb makes, length, type, data and CRC, up to IEND.
void check_png_chunks(const std::vector<uint8_t>& b, const std::string& path) {
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (b.size() < 8 || std::memcmp(b.data(), signature, 8) != 0) return;
    for (size_t at = 8; at + 8 <= b.size();) {
        const uint64_t length = uint64_t(b[at]) << 24 | uint64_t(b[at + 1]) << 16 | uint64_t(b[at + 2]) << 8 | b[at + 3];
        const std::string type(b.begin() + long(at) + 4, b.begin() + long(at) + 8);
        if (length + 12 > b.size() - at)
            throw Error(path + ": cannot decode: its PNG chunk '" + type + "' at byte " + std::to_string(at) + " of " +
                        std::to_string(length) + " bytes runs past the end of the file (" + std::to_string(b.size()) + " bytes)");
        if (type == "IEND") return;
        at += 12 + length;
    }
}

// The file's first `limit` bytes, or all of them.
std::vector<uint8_t> read_file(const std::string& path, size_t limit = SIZE_MAX) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t piece[1 << 16];
    while (bytes.size() < limit) {
        const size_t n = std::fread(piece, 1, std::min(sizeof piece, limit - bytes.size()), f.get());
        if (n == 0) break;
        bytes.insert(bytes.end(), piece, piece + n);
    }
    if (std::ferror(f.get())) throw Error(path + ": cannot read: " + std::strerror(errno));
    if (bytes.size() > size_t(INT32_MAX)) throw Error(path + ": " + std::to_string(bytes.size()) + " bytes, more than stb_image reads");
    return bytes;
}

// The header in `bytes` (the file, or its beginning) as stb_image reads it, checked; false when these
// bytes hold no header stb reads. stb's header reader builds the Huffman tables it meets too.
bool header_checked(const std::vector<uint8_t>& bytes, const std::string& path) {
    check_jpeg_huffman_tables(bytes, path);
    int width = 0, height = 0, channels = 0;
    if (!stbi_info_from_memory(bytes.data(), int(bytes.size()), &width, &height, &channels)) return false;
    // stb_image passes a BMP header of width 0 (fuzz_image found it), which the resize would divide by.
    if (width < 1 || height < 1)
        throw Error(path + ": an image of " + std::to_string(width) + " x " + std::to_string(height) + " pixels has none");
    if (int64_t(width) * height > kMaxPixels)
        throw Error(path + ": " + std::to_string(width) + " x " + std::to_string(height) + " pixels, more than " +
                    std::to_string(kMaxPixels) + " (PIL's limit against decompression bombs)");
    return true;
}

[[noreturn]] void not_an_image(const std::string& path) {
    throw Error(path + ": not an image this build reads (PNG, JPEG, BMP): " + stbi_failure_reason());
}

struct Taps {
    int64_t first = 0;            // the first source pixel
    std::vector<double> weights;  // of first, first + 1, ...; they sum to 1
};

// Pillow's precompute_coeffs for the bilinear filter, for outputs [from, from + count) of a resize
// from `in` to `out` pixels.
std::vector<Taps> bilinear_taps(int64_t in, int64_t out, int64_t from, int64_t count) {
    const double scale = double(in) / double(out), filterscale = std::max(scale, 1.0), support = filterscale;
    std::vector<Taps> taps(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
        const double center = (double(from + i) + 0.5) * scale;
        // Pillow rounds with a cast, which truncates toward zero, then clamps.
        const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
        const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(center + support + 0.5));
        Taps& t = taps[static_cast<size_t>(i)];
        t.first = lo;
        double sum = 0;
        for (int64_t x = lo; x < hi; ++x) {
            const double w = std::max(0.0, 1.0 - std::fabs((double(x) - center + 0.5) / filterscale));
            t.weights.push_back(w);
            sum += w;
        }
        if (sum != 0)
            for (double& w : t.weights) w /= sum;
    }
    return taps;
}

// torchvision's CenterCrop offset: Python's round((size - crop) / 2), which rounds halves to even.
int64_t crop_offset(int64_t size, int64_t crop) {
    const int64_t d = size - crop, half = d / 2;
    return d % 2 == 1 && half % 2 == 1 ? half + 1 : half;
}

}  // namespace

void check_image(const std::string& path) {
    // A header is in the first MiB but for a rare file with large metadata, which is read whole then.
    constexpr size_t kPrefix = 1 << 20;
    const std::vector<uint8_t> start = read_file(path, kPrefix);
    if (header_checked(start, path)) return;
    if (start.size() < kPrefix || !header_checked(read_file(path), path)) not_an_image(path);
}

Image read_image(const std::string& path) {
    const std::vector<uint8_t> bytes = read_file(path);
    if (!header_checked(bytes, path)) not_an_image(path);
    check_png_chunks(bytes, path);
    int width = 0, height = 0, channels = 0;
    std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
        stbi_load_from_memory(bytes.data(), int(bytes.size()), &width, &height, &channels, 3), stbi_image_free);
    if (!pixels) throw Error(path + ": cannot decode: " + stbi_failure_reason());
    Image image{.height = height, .width = width};
    image.rgb.assign(pixels.get(), pixels.get() + size_t(width) * size_t(height) * 3);
    return image;
}

namespace {

// The `region` of the image (PIL's crop) resized to out_h x out_w, of which the crop x crop window at
// (top, left) is written, mirrored left to right with `flip`, after ToTensor's / 255 and Normalize.
void resample(const Image& image, const Augmentation& region, int64_t out_h, int64_t out_w, int64_t top, int64_t left,
              const ImageTransform& t, float* out) {
    std::vector<Taps> cols = bilinear_taps(region.width, out_w, left, t.crop);
    std::vector<Taps> rows = bilinear_taps(region.height, out_h, top, t.crop);
    for (Taps& c : cols) c.first += region.left;
    for (Taps& r : rows) r.first += region.top;
    if (region.flip) std::reverse(cols.begin(), cols.end());

    // Horizontal pass over the source rows the vertical taps read.
    const int64_t row0 = rows.front().first;
    const int64_t row1 = rows.back().first + static_cast<int64_t>(rows.back().weights.size());
    const size_t c = static_cast<size_t>(t.crop);
    std::vector<double> across(static_cast<size_t>(row1 - row0) * c * 3);
    for (int64_t y = row0; y < row1; ++y) {
        const uint8_t* src = image.rgb.data() + size_t(y * image.width) * 3;
        double* dst = across.data() + size_t(y - row0) * c * 3;
        for (size_t x = 0; x < c; ++x)
            for (size_t k = 0; k < cols[x].weights.size(); ++k)
                for (size_t ch = 0; ch < 3; ++ch)
                    dst[x * 3 + ch] += cols[x].weights[k] * src[(size_t(cols[x].first) + k) * 3 + ch];
    }
    // Vertical pass, then ToTensor's / 255 and Normalize.
    for (size_t y = 0; y < c; ++y) {
        for (size_t x = 0; x < c; ++x) {
            double v[3] = {0, 0, 0};
            for (size_t k = 0; k < rows[y].weights.size(); ++k) {
                const double* src = across.data() + (size_t(rows[y].first - row0) + k) * c * 3 + x * 3;
                for (size_t ch = 0; ch < 3; ++ch) v[ch] += rows[y].weights[k] * src[ch];
            }
            for (size_t ch = 0; ch < 3; ++ch)
                out[(ch * c + y) * c + x] = static_cast<float>((v[ch] / 255 - t.mean[ch]) / t.std[ch]);
        }
    }
}

// Python's round(): halves to even, as nearbyint in the default rounding mode.
int64_t python_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// A double in [lo, hi) and an integer in [0, n) from the generator's bits by fixed formulas, not the
// standard library's distributions (whose algorithms it leaves open), so a seed draws the same
// regions everywhere.
double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * double(rng() >> 11) * 0x1p-53; }
int64_t below(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }

}  // namespace

void preprocess(const Image& image, const ImageTransform& t, float* out) {
    if (t.crop < 1 || t.crop > t.resize)
        throw Error("image transform: the crop " + std::to_string(t.crop) + " must be from 1 to the resize " +
                    std::to_string(t.resize));
    // torchvision's Resize(int): the shorter side to `resize`, the longer one scaled and truncated.
    const int64_t h = image.height, w = image.width;
    const int64_t out_h = h <= w ? t.resize : t.resize * h / w, out_w = h <= w ? t.resize * w / h : t.resize;
    resample(image, {.height = h, .width = w}, out_h, out_w, crop_offset(out_h, t.crop), crop_offset(out_w, t.crop), t, out);
}

Augmentation random_augmentation(int64_t height, int64_t width, std::mt19937_64& rng) {
    // torchvision's RandomResizedCrop.get_params with scale (0.08, 1) and ratio (3/4, 4/3).
    const double area = double(height * width), min_ratio = 3.0 / 4, max_ratio = 4.0 / 3;
    Augmentation a;
    bool found = false;
    for (int attempt = 0; attempt < 10 && !found; ++attempt) {
        const double target = area * uniform(rng, 0.08, 1.0);
        const double ratio = std::exp(uniform(rng, std::log(min_ratio), std::log(max_ratio)));
        const int64_t w = python_round(std::sqrt(target * ratio)), h = python_round(std::sqrt(target / ratio));
        if (0 < w && w <= width && 0 < h && h <= height) {
            a = {.top = below(rng, height - h + 1), .left = below(rng, width - w + 1), .height = h, .width = w};
            found = true;
        }
    }
    if (!found) {  // its fallback: the centre, all of the image its aspect ratio allows
        const double in_ratio = double(width) / double(height);
        a = {.height = height, .width = width};
        if (in_ratio < min_ratio) a.height = python_round(double(width) / min_ratio);
        if (in_ratio > max_ratio) a.width = python_round(double(height) * max_ratio);
        a.top = (height - a.height) / 2;
        a.left = (width - a.width) / 2;
    }
    a.flip = rng() >> 63;  // RandomHorizontalFlip(0.5)
    return a;
}

void augment(const Image& image, const Augmentation& a, const ImageTransform& t, float* out) {
    if (a.top < 0 || a.left < 0 || a.height < 1 || a.width < 1 || a.top + a.height > image.height || a.left + a.width > image.width)
        throw Error("image augmentation: the region (" + std::to_string(a.top) + ", " + std::to_string(a.left) + ") + " +
                    std::to_string(a.height) + " x " + std::to_string(a.width) + " is not inside the image of " +
                    std::to_string(image.height) + " x " + std::to_string(image.width));
    resample(image, a, t.crop, t.crop, 0, 0, t, out);
}

}  // namespace mn::io
