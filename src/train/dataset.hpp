#pragma once
// Datasets and batches on the host side of training.
//
// A Dataset is a dense row-major matrix of float features (one row per example) and one int32
// class label per row; Fashion-MNIST is the one we ship a loader for. Batches are copied out of
// it into caller-owned vectors, which the caller hands to Session::set.
//
// BatchIterator visits the examples of one epoch in a shuffled order that is a pure function of
// (seed, epoch): a run resumed at epoch e, batch b (seek) sees exactly the batches the
// uninterrupted run would have seen. The shuffle is our own Fisher-Yates over std::mt19937_64
// (whose output the standard fixes bit for bit) rather than std::shuffle, whose algorithm is
// left to the library, so the order is also the same across standard libraries.
#include <cstdint>
#include <string>
#include <vector>

namespace mn::train {

struct Dataset {
    std::vector<float> images;    // count * features values, row-major, in [0, 1] for images
    std::vector<int32_t> labels;  // count class indices
    int64_t count = 0, features = 0;
};

// $MEGANEURA_DATA_DIR/fashion-mnist when the variable is set, else /usr/share/datasets/fashion-mnist.
std::string default_fashion_mnist_dir();

// split is "train" (60000 examples) or "test" (10000); dir defaults to default_fashion_mnist_dir().
// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; pixels become pixel / 255, 784 features.
// Throws mn::Error naming the path on a missing directory or file, a corrupt file, a count
// mismatch between images and labels, or a label above 9.
Dataset load_fashion_mnist(const std::string& split, const std::string& dir = "");

// Copies rows [start, start + batch) into x (batch * features) and y (batch); rows past the end
// are zeros with label 0. Returns how many rows are real. Requires 0 <= start <= count.
int64_t fill_batch(const Dataset& data, int64_t start, int64_t batch, std::vector<float>& x,
                   std::vector<int32_t>& y);

class BatchIterator {
public:
    // Keeps a reference to `data`, which must outlive the iterator. Starts at (epoch, batch 0).
    // With drop_last the short final batch of an epoch is skipped (training: every batch has
    // `batch` rows); without it that batch is yielded with fewer rows.
    BatchIterator(const Dataset& data, int64_t batch, uint64_t seed, int64_t epoch = 0,
                  bool drop_last = true);

    // The next batch of the current epoch into x and y (resized to rows * features and rows);
    // false, leaving x and y alone, when the epoch is exhausted: call seek(epoch() + 1) then.
    bool next(std::vector<float>& x, std::vector<int32_t>& y);
    // Moves to batch `batch_index` of `epoch`, reshuffling when the epoch changes.
    void seek(int64_t epoch, int64_t batch_index = 0);

    int64_t epoch() const { return epoch_; }
    int64_t batches_per_epoch() const;
    const std::vector<int64_t>& order() const { return order_; }

    // The visiting order of `epoch`: a permutation of [0, count) determined by (seed, epoch) alone.
    static std::vector<int64_t> permutation(int64_t count, uint64_t seed, int64_t epoch);

private:
    const Dataset& data_;
    int64_t batch_;
    uint64_t seed_;
    bool drop_last_;
    int64_t epoch_ = -1, position_ = 0;  // position_: the next row of order_
    std::vector<int64_t> order_;
};

}  // namespace mn::train
