#pragma once
// Internals of fusion shared by fuse_modules and prepare_qat.
#include <string>
#include <vector>

#include "framework/nn/graph.h"
#include "modules/quant/fuse.h"

namespace qat::quant {

namespace detail {
/// A planned swap: `parent`'s child `name` becomes `module`.
struct Replacement {
  nn::Module* parent;
  std::string name;
  nn::ModulePtr module;
};
/// Checks `groups` and plans their fusion without changing the model (fuse_modules applies it).
std::vector<FusedGroup> plan_fusion(nn::Module& model, const std::vector<FusionGroup>& groups,
                                    std::vector<Replacement>& plan);
/// Modules and ops whose output lies on their input's grid: ReLU, MaxPool2d, Flatten, Identity,
/// Dropout, reshape (int8 values pass through them; average pools do too, rounded back).
bool keeps_grid(const nn::GraphNode& n);
/// Runs of fusable siblings in Sequential containers, by position.
std::vector<FusionGroup> sequential_fusion_groups(nn::Module& model);
/// Runs found in a captured graph: each module called once, each value in the run read only by
/// the next module of the run. Why a candidate was not fused goes to `notes`.
std::vector<FusionGroup> graph_fusion_groups(const nn::Graph& graph, std::vector<std::string>& notes);
}  // namespace detail

}  // namespace qat::quant
