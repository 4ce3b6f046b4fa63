#pragma once
// Fine-tuning torchvision ResNet weights on a folder of images, one sub-folder per class
// (image_folder.hpp): the architecture read from the weights, a new classifier head (fc) sized to the
// classes, every image prepared as torchvision's evaluation transform prepares it (io/image.hpp), AdamW
// on a cosine over every parameter (with `augment`, the training images through torchvision's random
// training transform), the held-out loss and accuracy after every epoch, and the
// checkpoint, resume and loss curve every fine-tune has (finetune_loop.hpp).
//
// Batch norms stay in eval mode by default, with the weights' running statistics folded into the
// convolutions; their scale and shift train. That suits the small batches a fine-tune on one device
// affords, where batch statistics are noise. With `train_bn` they normalize with batch statistics and
// update the running ones, as a torchvision model in train() mode does; evaluation always uses the
// running statistics.
//
// OUT gets checkpoint.safetensors, loss.csv and loss.svg, classes.txt (one class name per line, in
// label order), and model.safetensors: the fine-tuned weights under torchvision's names, the running
// statistics and num_batches_tracked, so torchvision's ResNet with fc of that many classes loads them
// with load_state_dict(strict=True).
#include <string>

#include "meganeura/session.hpp"
#include "train/finetune_loop.hpp"

namespace mn::train {

struct ImageFinetuneRun {
    std::string weights;  // torchvision ResNet weights (.safetensors)
    std::string data;     // the image folder
    std::string out;
    int64_t epochs = 1, batch = 4;
    int64_t image_size = 224;  // the crop; the shorter side is resized to image_size / 0.875 first
    double lr = 2e-4, weight_decay = 0;
    uint64_t seed = 0;    // the new head's initialization, the order of the images and their augmentation
    bool augment = false; // training images through RandomResizedCrop and RandomHorizontalFlip (io/image.hpp)
    bool train_bn = false; // batch norms on batch statistics while training, updating the running ones
    bool resume = false;  // continue from out/checkpoint.safetensors
    Precision precision = Precision::Strict;  // of the training step and of the evaluation
    // Data parallel (--distributed): `batch` images per process, as FinetuneRun::world says for blocks.
    distributed::World* world = nullptr;
};

FinetuneResult finetune_images(const Device& device, const ImageFinetuneRun& run);

}  // namespace mn::train
