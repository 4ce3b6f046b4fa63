#pragma once
// meganeura: train and run neural networks on any GPU through Vulkan.
#include "meganeura/error.hpp"
#include "meganeura/graph.hpp"
#include "meganeura/session.hpp"
