#pragma once
// An image-classification dataset laid out as torchvision's ImageFolder reads one: ROOT/<class>/...,
// the classes the sub-folders of ROOT in sorted order (a class's index is its label), a class's
// images every file below its folder with an extension this build decodes (.png .jpg .jpeg .bmp, any
// case), in sorted order; other files are skipped, as ImageFolder skips them.
//
// A tenth of each class (at least one image) is held out for evaluation, the same ones on every run:
// the class's images are shuffled by a fixed seed and the last tenth taken, so the split keeps the
// classes' proportions and does not follow the order of the file names (often the order they were
// taken in). Every image's header is checked when the folder is opened, so a file that is no image
// stops the run before anything is compiled; a corrupt body is found when it is decoded.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/image.hpp"

namespace mn::train {

struct LabelledImage {
    std::string path;
    int32_t label = 0;
};

struct ImageFolder {
    std::string root;
    std::vector<std::string> classes;
    std::vector<LabelledImage> train, eval;
};

// An mn::Error names the folder, class or file: no such folder, fewer than two classes, a class with
// fewer than two images (one is held out), a file that does not open or is not an image.
ImageFolder open_image_folder(const std::string& root);

// torchvision's random training transform (io::augment) for a batch of `epoch`: image i's draw is
// seeded by (seed, epoch, i), so a resumed run draws what the uninterrupted one would have.
struct Augment {
    uint64_t seed = 0;
    int64_t epoch = 0;
};

// Decodes and transforms `images[rows[i]]` into row i of x ([batch, 3, crop, crop]) and its label
// into y ([batch]), on every core; rows past rows.size() are zeros with label 0. Without `augment`,
// the evaluation transform (io::preprocess).
void fill_image_batch(const std::vector<LabelledImage>& images, const std::vector<int64_t>& rows, int64_t batch,
                      const io::ImageTransform& transform, std::vector<float>& x, std::vector<int32_t>& y,
                      const std::optional<Augment>& augment = std::nullopt);

}  // namespace mn::train
