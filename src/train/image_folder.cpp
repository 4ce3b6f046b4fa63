#include "train/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>
#include <mutex>
#include <random>

#include "common/parallel.hpp"
#include "meganeura/error.hpp"
#include "train/dataset.hpp"

namespace mn::train {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSplitSeed = 0x5EED;  // fixed: the split must not move with --seed or between runs

std::string counted(size_t n, const std::string& thing) { return std::to_string(n) + " " + thing + (n == 1 ? "" : "s"); }

bool decodable(const fs::path& file) {
    std::string ext = file.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const char* known : {".png", ".jpg", ".jpeg", ".bmp"})
        if (ext == known) return true;
    return false;
}

// Every decodable file below `dir`, sorted; folder symlinks are followed, as ImageFolder's os.walk does.
std::vector<std::string> images_below(const fs::path& dir) {
    std::vector<std::string> files;
    try {
        for (const auto& entry : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
            if (!entry.is_directory() && decodable(entry.path())) files.push_back(entry.path().string());
    } catch (const fs::filesystem_error& e) {
        throw Error(dir.string() + ": cannot list: " + e.code().message());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

ImageFolder open_image_folder(const std::string& root) {
    if (!fs::is_directory(root)) throw Error("--data " + root + ": no such folder (one sub-folder of images per class)");
    ImageFolder folder{.root = root};
    for (const auto& entry : fs::directory_iterator(root))
        if (entry.is_directory()) folder.classes.push_back(entry.path().filename().string());
    std::sort(folder.classes.begin(), folder.classes.end());
    if (folder.classes.size() < 2)
        throw Error("--data " + root + ": " + counted(folder.classes.size(), "class folder") +
                    "; a classifier needs at least two (one sub-folder of images per class)");
    for (size_t label = 0; label < folder.classes.size(); ++label) {
        const std::vector<std::string> files = images_below(fs::path(root) / folder.classes[label]);
        if (files.size() < 2)
            throw Error("--data " + root + ": class '" + folder.classes[label] + "' has " + counted(files.size(), "image") +
                        " (.png .jpg .jpeg .bmp); each class needs at least two, one to hold out");
        for (const std::string& f : files) io::check_image(f);
        // The permutation's "epoch" is the class: each class gets its own fixed shuffle.
        const std::vector<int64_t> order = BatchIterator::permutation(static_cast<int64_t>(files.size()), kSplitSeed,
                                                                      static_cast<int64_t>(label));
        const size_t held = std::max<size_t>(1, files.size() / 10);
        for (size_t i = 0; i < order.size(); ++i) {
            LabelledImage image{.path = files[static_cast<size_t>(order[i])], .label = static_cast<int32_t>(label)};
            (i + held < order.size() ? folder.train : folder.eval).push_back(std::move(image));
        }
    }
    return folder;
}

void fill_image_batch(const std::vector<LabelledImage>& images, const std::vector<int64_t>& rows, int64_t batch,
                      const io::ImageTransform& transform, std::vector<float>& x, std::vector<int32_t>& y,
                      const std::optional<Augment>& augment) {
    const size_t per_image = static_cast<size_t>(3 * transform.crop * transform.crop);
    x.assign(static_cast<size_t>(batch) * per_image, 0.0f);
    y.assign(static_cast<size_t>(batch), 0);
    // Decoding dominates a step's host time (a JPEG photo takes milliseconds), so the rows are shared
    // out over the cores; each writes its own rows, and the first error is the batch's.
    std::mutex failed;
    std::exception_ptr error;
    parallel_for(rows.size(), [&](size_t r) {
        try {
            const LabelledImage& image = images[static_cast<size_t>(rows[r])];
            const io::Image pixels = io::read_image(image.path);
            float* dst = x.data() + r * per_image;
            if (augment) {
                const auto u32 = [](uint64_t v, int half) { return static_cast<uint32_t>(v >> (32 * half)); };
                const uint64_t e = static_cast<uint64_t>(augment->epoch), i = static_cast<uint64_t>(rows[r]);
                std::seed_seq seq{u32(augment->seed, 0), u32(augment->seed, 1), u32(e, 0), u32(e, 1), u32(i, 0), u32(i, 1)};
                std::mt19937_64 rng(seq);
                io::augment(pixels, io::random_augmentation(pixels.height, pixels.width, rng), transform, dst);
            } else {
                io::preprocess(pixels, transform, dst);
            }
            y[r] = image.label;
        } catch (...) {
            const std::lock_guard<std::mutex> lock(failed);
            if (!error) error = std::current_exception();
        }
    });
    if (error) std::rethrow_exception(error);
}

}  // namespace mn::train
