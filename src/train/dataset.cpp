// Fashion-MNIST loading and batching.
//
// The four IDX files are read with mn::io::read_idx (which handles the gzip layer); every way
// they can be wrong ends in one mn::Error that names the file and says how to get good files,
// because the usual cause is that the dataset package is not installed. The checks are the ones
// that would otherwise surface much later as nonsense: images that are not a stack of 2-D
// images, image and label counts that disagree, labels outside the ten classes.
//
// Shuffling seeds std::mt19937_64 through std::seed_seq with both halves of the seed and of the
// epoch, so neighbouring epochs (and seeds) get unrelated streams, and draws each swap index by
// the multiply-shift reduction (a 64-bit draw times the range, keep the high 64 bits), whose
// bias is at most range / 2^64 and which, unlike std::uniform_int_distribution, is the same in
// every standard library.
#include "train/dataset.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include "io/idx.hpp"
#include "meganeura/error.hpp"

namespace mn::train {
namespace {

const char* const kHint =
    "install the Debian package dataset-fashion-mnist (make setup does), or point "
    "MEGANEURA_DATA_DIR at a directory holding fashion-mnist/";
constexpr int32_t kClasses = 10;

[[noreturn]] void fail(const std::string& what) { throw Error(what + "; " + kHint); }

io::IdxArray read_checked(const std::string& path) {
    if (!std::filesystem::is_regular_file(path)) fail("missing dataset file " + path);
    try {
        return io::read_idx(path);
    } catch (const Error& error) {
        fail(error.what());
    }
}

std::vector<float> to_pixels(const io::IdxArray& images, const std::string& path) {
    if (images.shape.size() != 3)
        fail(path + ": expected images of rank 3 (count, rows, columns), got rank " +
             std::to_string(images.shape.size()));
    std::vector<float> pixels(images.data.size());
    std::transform(images.data.begin(), images.data.end(), pixels.begin(),
                   [](uint8_t p) { return float(p) / 255.0f; });
    return pixels;
}

std::vector<int32_t> to_labels(const io::IdxArray& labels, const std::string& path) {
    if (labels.shape.size() != 1)
        fail(path + ": expected labels of rank 1, got rank " + std::to_string(labels.shape.size()));
    std::vector<int32_t> out(labels.data.begin(), labels.data.end());
    for (size_t i = 0; i < out.size(); ++i)
        if (out[i] >= kClasses)
            fail(path + ": label " + std::to_string(out[i]) + " at index " + std::to_string(i) +
                 " is outside the " + std::to_string(kClasses) + " classes");
    return out;
}

}  // namespace

std::string default_fashion_mnist_dir() {
    const char* root = std::getenv("MEGANEURA_DATA_DIR");
    if (root && *root) return (std::filesystem::path(root) / "fashion-mnist").string();
    return "/usr/share/datasets/fashion-mnist";
}

Dataset load_fashion_mnist(const std::string& split, const std::string& dir) {
    if (split != "train" && split != "test")
        throw Error("unknown Fashion-MNIST split \"" + split + "\"; expected \"train\" or \"test\"");
    const std::string root = dir.empty() ? default_fashion_mnist_dir() : dir;
    if (!std::filesystem::is_directory(root)) fail("no dataset directory " + root);

    const std::string prefix = root + "/" + (split == "train" ? "train" : "t10k");
    const std::string images_path = prefix + "-images-idx3-ubyte.gz";
    const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
    const io::IdxArray images = read_checked(images_path);
    const io::IdxArray labels = read_checked(labels_path);

    Dataset data;
    data.images = to_pixels(images, images_path);
    data.labels = to_labels(labels, labels_path);
    data.count = images.shape[0];
    data.features = images.shape[1] * images.shape[2];
    if (labels.shape[0] != data.count)
        fail(images_path + " holds " + std::to_string(data.count) + " images but " + labels_path +
             " holds " + std::to_string(labels.shape[0]) + " labels");
    return data;
}

int64_t fill_batch(const Dataset& data, int64_t start, int64_t batch, std::vector<float>& x,
                   std::vector<int32_t>& y) {
    if (batch <= 0 || start < 0 || start > data.count)
        throw Error("fill_batch: start " + std::to_string(start) + ", batch " + std::to_string(batch) +
                    " is outside a dataset of " + std::to_string(data.count) + " examples");
    const int64_t rows = std::min(batch, data.count - start);
    x.assign(batch * data.features, 0.0f);
    y.assign(batch, 0);
    std::copy_n(data.images.begin() + start * data.features, rows * data.features, x.begin());
    std::copy_n(data.labels.begin() + start, rows, y.begin());
    return rows;
}

BatchIterator::BatchIterator(const Dataset& data, int64_t batch, uint64_t seed, int64_t epoch,
                             bool drop_last)
    : data_(data), batch_(batch), seed_(seed), drop_last_(drop_last) {
    if (batch <= 0 || data.count <= 0 || (drop_last && batch > data.count))
        throw Error("batch size " + std::to_string(batch) + " does not fit a dataset of " +
                    std::to_string(data.count) + " examples");
    seek(epoch);
}

int64_t BatchIterator::batches_per_epoch() const {
    return drop_last_ ? data_.count / batch_ : (data_.count + batch_ - 1) / batch_;
}

void BatchIterator::seek(int64_t epoch, int64_t batch_index) {
    if (epoch < 0 || batch_index < 0 || batch_index > batches_per_epoch())
        throw Error("cannot seek to epoch " + std::to_string(epoch) + ", batch " +
                    std::to_string(batch_index) + " (" + std::to_string(batches_per_epoch()) +
                    " batches per epoch)");
    if (epoch != epoch_) order_ = permutation(data_.count, seed_, epoch);
    epoch_ = epoch;
    position_ = batch_index * batch_;
}

bool BatchIterator::next(std::vector<float>& x, std::vector<int32_t>& y) {
    const int64_t rows = std::min(batch_, data_.count - position_);
    if (rows <= 0 || (drop_last_ && rows < batch_)) return false;
    x.resize(rows * data_.features);
    y.resize(rows);
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t index = order_[position_ + r];
        std::copy_n(data_.images.begin() + index * data_.features, data_.features,
                    x.begin() + r * data_.features);
        y[r] = data_.labels[index];
    }
    position_ += rows;
    return true;
}

std::vector<int64_t> BatchIterator::permutation(int64_t count, uint64_t seed, int64_t epoch) {
    const uint64_t e = uint64_t(epoch);
    std::seed_seq sequence{uint32_t(seed), uint32_t(seed >> 32), uint32_t(e), uint32_t(e >> 32)};
    std::mt19937_64 rng(sequence);
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), int64_t{0});
    for (int64_t i = count - 1; i > 0; --i) {
        const auto j = int64_t((unsigned __int128)rng() * uint64_t(i + 1) >> 64);
        std::swap(order[i], order[j]);
    }
    return order;
}

}  // namespace mn::train
