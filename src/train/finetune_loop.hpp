#pragma once
// What every `meganeura finetune` shares, whatever the model and the data (text into a causal LM,
// finetune.hpp; images into a classifier, image_finetune.hpp): the output folder with its checkpoint
// to resume from, the trainable parameters and the memory plan on stderr, AdamW on a cosine over the
// run, and the step loop: progress, a non-finite loss stopping the run, and at every evaluation what
// training changed copied into the evaluation session on the device, the held-out result printed,
// the checkpoint and the loss curve (loss.csv, loss.svg) written.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distributed/world.hpp"
#include "io/safetensors.hpp"
#include "meganeura/session.hpp"

namespace mn::train {

// A process's place in a distributed run (--distributed): rank `rank` of `ranks` takes items rank * batch
// .. (rank + 1) * batch - 1 of each step's ranks * batch; a single process is rank 0 of 1.
struct Shard {
    int64_t rank = 0, ranks = 1;
    bool root() const { return rank == 0; }
};
Shard shard_of(const distributed::World* world);

// OUT/checkpoint.safetensors, once OUT is checked and created: a new run refuses an OUT that has one
// (it would be overwritten), --resume an OUT that has none.
std::string prepare_output(const std::string& out, bool resume);

// OUT/<name>, what a resumed run must repeat (a text): written by a new run; on resume the file must
// hold the same text, else the error is `mismatch(what the file holds)`.
void record_run(const std::string& out, const std::string& name, const std::string& text, bool resume,
                const std::function<std::string(const std::string& was)>& mismatch);

// `items` with `between` between them.
std::string joined(const std::vector<std::string>& items, const std::string& between);

struct Trainable {
    std::vector<std::string> names;  // the parameters that require a gradient, in graph order
    int64_t parameters = 0, count = 0;  // elements of every parameter, of the trainable ones
};
Trainable trainable_parameters(const Graph& g);

// `what` the trainable parameters are ("full fine-tune", "LoRA rank 8 on 4 modules"), and the session's memory.
void print_plan(const std::string& model, const Trainable& t, const std::string& what, const SessionStats& stats);

// The named values of `s`, as f32 tensors to write.
io::TensorMap tensors_of(const Session& s, const std::vector<std::string>& names);

struct AdamWRun {
    double lr = 2e-4, weight_decay = 0;
    int64_t total_steps = 1;  // the cosine reaches 0 there
    uint64_t seed = 0;        // parameter initialization
};
CompileOptions training_options(Tensor loss, const AdamWRun& run);

// A held-out evaluation: the mean loss, and for a classifier the fraction of correct predictions.
struct HeldOut {
    double loss = 0;
    std::optional<double> accuracy;
};

struct FinetuneResult {
    int64_t steps = 0;                   // taken by this run (a resumed one counts its own)
    float first_loss = 0, last_loss = 0;  // of the first and the last step of this run
    HeldOut first_eval, last_eval;        // before the first step and after the last
};

struct StepLoop {
    std::string out;          // the output folder (prepare_output)
    int64_t total = 0;        // the run's last step
    int64_t eval_every = 0;   // also evaluate and checkpoint every this many steps; 0: at the end only
    int64_t epoch_steps = 0;  // > 0: steps per epoch, and an evaluation names its epoch
    int64_t per_step = 0;     // items per step, shown as a rate ...
    std::string unit;         // ... of these ("tokens", "images"); empty: none
    std::string curve_title;  // of loss.svg
    // The parameters the checkpoint leaves out: a LoRA run's frozen base, which a resumed run reads
    // from -m again (540 MB of SmolLM2-135M in every checkpoint otherwise). Unset: none.
    std::function<bool(const std::string&)> frozen;
    // Data parallel (--distributed): rank 0 broadcasts the values `to_eval` names before the first step,
    // and alone evaluates, prints and writes the checkpoint and the curve. Unset: one process.
    distributed::World* world = nullptr;
};

// Steps train.step_count() + 1 .. loop.total (a resumed run already there is an error: nothing to
// do, and "0 steps" would read as a result): `feed(step)` sets the step's inputs; `evaluate()` runs
// the evaluation session, into which the values `to_eval` names (what training changes: the
// trainable parameters, and running statistics) have been copied; it also runs once before the first
// step. A resumed run continues OUT/loss.csv. SIGINT or SIGTERM (Ctrl-C, a job's time limit) stops
// the run after the step in progress: the checkpoint is written there, and the error says that
// --resume continues it (a second signal ends the process at once).
FinetuneResult run_steps(Session& train, Session& eval, const std::vector<std::string>& to_eval, const StepLoop& loop,
                         const std::function<void(int64_t step)>& feed, const std::function<HeldOut()>& evaluate);

}  // namespace mn::train
