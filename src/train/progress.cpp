// Progress: a throttled terminal bar, or sparse log lines.
//
// Two throttles keep the output proportionate. The bar redraws when 100 ms have passed since
// the last draw (or on the last step), so a loop running thousands of steps a second costs ten
// small writes a second. The line form is paced by steps, not time: a line when the step
// reaches the next tenth of the total, so the log of a run is the same length however fast the
// machine is, and tests can count its lines. Rates count from the step before the first update
// so that a run resumed at step 5000 reports its own speed, not 5000 steps in its first second.
// The loss shown is an exponential moving average (weight 0.05 on the newest value): single
// batch losses are too noisy to read at a glance.
#include "train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace mn::train {
namespace {

constexpr double kEmaWeight = 0.05;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 20;

std::string format(const char* pattern, double value) {
    char text[64];
    std::snprintf(text, sizeof text, pattern, value);
    return text;
}

std::string duration(double seconds) {
    const auto total = int64_t(std::max(0.0, std::round(seconds)));
    char text[32];
    if (total >= 3600)
        std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", (long long)(total / 3600),
                      (long long)(total / 60 % 60), (long long)(total % 60));
    else
        std::snprintf(text, sizeof text, "%lld:%02lld", (long long)(total / 60), (long long)(total % 60));
    return text;
}

}  // namespace

std::FILE* no_output() {
    static std::FILE* f = std::fopen("/dev/null", "w");
    return f;
}

Progress::Progress(std::string label, int64_t total_steps, std::FILE* out, Style style)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total_steps, 1)),
      out_(out),
      bar_(style == Style::Bar || (style == Style::Auto && isatty(fileno(out)))),
      start_(Clock::now()),
      last_draw_(start_ - kRedrawInterval) {}

Progress::~Progress() {
    if (bar_ && first_step_ >= 0 && !finished_) std::fputc('\n', out_);  // keep later output off the bar
}

void Progress::update(int64_t step, double loss) {
    if (first_step_ < 0) {
        first_step_ = step - 1;
        ema_ = loss;
    } else {
        ema_ += kEmaWeight * (loss - ema_);
    }
    step_ = step;
    if (bar_) {
        if (Clock::now() - last_draw_ >= kRedrawInterval || step >= total_) draw_bar();
    } else if (step >= next_line_step_) {
        write_line();
    }
}

void Progress::finish() {
    if (finished_) return;
    finished_ = true;
    const int64_t steps = first_step_ < 0 ? 0 : step_ - first_step_;
    const double seconds = seconds_since_start();
    std::string summary = label_ + ": done, " + std::to_string(steps) + " steps in " + duration(seconds);
    if (seconds > 0 && steps > 0) summary += format(" (%.1f step/s)", steps / seconds);
    if (first_step_ >= 0) summary += format(", loss %.4g", ema_);
    std::fprintf(out_, bar_ ? "\r%s\033[K\n" : "%s\n", summary.c_str());
    std::fflush(out_);
}

double Progress::seconds_since_start() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string Progress::status_text() const {
    const int64_t shown = std::min(step_, total_);
    std::string text = format("%3.0f%%", std::floor(100.0 * double(shown) / double(total_))) + "  " +
                       std::to_string(step_) + "/" + std::to_string(total_);
    const double seconds = seconds_since_start();
    const double rate = seconds > 0 ? double(step_ - first_step_) / seconds : 0;
    if (rate > 0) text += format("  %.1f step/s", rate);
    if (rate > 0 && per_step_ > 0) text += format("  %.0f ", rate * double(per_step_)) + unit_ + "/s";
    text += format("  loss %.4g", ema_);
    if (rate > 0) text += "  ETA " + duration(double(total_ - shown) / rate);
    return text;
}

void Progress::draw_bar() {
    const int filled = int(kBarWidth * std::min(step_, total_) / total_);
    const std::string bar = std::string(filled, '#') + std::string(kBarWidth - filled, '.');
    std::fprintf(out_, "\r%s [%s] %s\033[K", label_.c_str(), bar.c_str(), status_text().c_str());
    std::fflush(out_);
    last_draw_ = Clock::now();
}

void Progress::write_line() {
    std::fprintf(out_, "%s: %s\n", label_.c_str(), status_text().c_str());
    std::fflush(out_);
    const int64_t tenth = (total_ + 9) / 10;
    next_line_step_ = step_ >= total_ ? INT64_MAX : std::min(total_, (step_ / tenth + 1) * tenth);
}

}  // namespace mn::train
