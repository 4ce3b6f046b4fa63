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
    // Also show the rate in tokens/s, for steps of `tokens` tokens each (a language model's batch).
    void show_tokens_per_step(int64_t tokens) { tokens_per_step_ = tokens; }

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
    int64_t tokens_per_step_ = 0;
    bool finished_ = false;
};

}  // namespace mn::train
