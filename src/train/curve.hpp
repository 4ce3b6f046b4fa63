#pragma once
// The record of a training run: loss per step, and evaluation accuracy at some steps.
//
// Written as CSV for tools and as a self-contained SVG plot for people; read back from CSV so a
// resumed run continues its curve. Both writes are atomic (temporary file, fsync, rename): a
// crash leaves the previous file, never half of one.
//
// CSV: header "step,loss,eval_accuracy", one row per step in increasing step order, an empty
// cell where that step has no value of the kind; numbers in the shortest form that reads back
// to the same float.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mn::train {

class LossCurve {
public:
    // Recording a step again replaces the earlier value (a resumed run redoing steps).
    void add(int64_t step, float loss);
    void add_eval(int64_t step, float accuracy);

    void write_csv(const std::string& path) const;
    // Loss against step on the left axis (from 0), per step and as a moving average; eval accuracy,
    // when present, as markers on a right axis from 0 to 1; a legend. At most 2000 points per
    // series: longer series are averaged over consecutive buckets.
    void write_svg(const std::string& path, const std::string& title = "Training loss") const;
    // Throws mn::Error naming the file and line on anything write_csv would not have written.
    static LossCurve read_csv(const std::string& path);

    struct Row {
        std::optional<float> loss, accuracy;
    };
    const std::map<int64_t, Row>& rows() const { return rows_; }

private:
    std::map<int64_t, Row> rows_;
};

}  // namespace mn::train
