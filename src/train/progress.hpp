#pragma once
// Progress reporting for long loops (training, evaluation).
//
// On a terminal it draws one bar, redrawn in place ('\r') at most ten times a second:
//
//   train [##########..........]  50%  3000/6000  812.4 step/s  loss 0.4213  ETA 0:04
//
// Anywhere else (a CI log, a file, a pipe) it writes a plain line each time another tenth of the
// total is done, so a run of any length adds about a dozen lines to a log. finish() ends either
// form with a summary line that gives the total time.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace mn::train {

class Progress {
public:
    enum class Style { Auto, Bar, Lines };  // Auto: Bar when `out` is a terminal

    Progress(std::string label, int64_t total_steps, std::FILE* out = stderr, Style style = Style::Auto);
    ~Progress();  // ends an unfinished bar's line, so an error message starts on a fresh one
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // `step` counts completed steps (1..total); a resumed run may start above 1, and steps/s
    // counts from the first step seen. `loss` feeds an exponential moving average.
    void update(int64_t step, double loss);
    void finish();

    double smoothed_loss() const { return ema_; }
    // Also show the rate in `unit`/s ("tokens", "images"), for steps of `per_step` of them each.
    void show_rate(int64_t per_step, std::string unit) {
        per_step_ = per_step;
        unit_ = std::move(unit);
    }

private:
    using Clock = std::chrono::steady_clock;

    double seconds_since_start() const;
    std::string status_text() const;
    void draw_bar();
    void write_line();

    std::string label_;
    int64_t total_;
    std::FILE* out_;
    bool bar_;
    Clock::time_point start_, last_draw_;
    int64_t first_step_ = -1, step_ = 0, next_line_step_ = 0;
    double ema_ = 0;
    int64_t per_step_ = 0;
    std::string unit_;
    bool finished_ = false;
};

// /dev/null: where the ranks of a distributed run but the first send their progress.
std::FILE* no_output();

}  // namespace mn::train
