// LossCurve: CSV and SVG output of a training run.
//
// Rows live in a map keyed by step, so output is ordered however the steps arrived, and a step
// recorded twice keeps its later value. Floats are printed with std::to_chars, the shortest text
// that reads back to the same float: CSV files round-trip exactly and stay readable ("0.1", not
// "0.100000001").
//
// The SVG is drawn by hand: a fixed 800x450 canvas, a plot frame, "nice" ticks (1, 2 or 5 times a
// power of ten, about five per axis) with light grid lines, a legend, and one polyline per series.
// The loss axis starts at 0 (a loss that halves looks halved); the per-step loss is drawn faint,
// its exponential moving average (debiased, as TensorBoard's smoothing) on top. Accuracy keeps a
// fixed 0-1 axis, so two evaluations 1.5 points apart look 1.5 points apart, and every evaluation is
// a marker, so a run with one evaluation still shows it. Points whose value is not finite are left
// out, since a NaN coordinate would void the whole polyline. Series longer than 2000 points are
// averaged over buckets of consecutive points, which keeps the file small.
#include "train/curve.hpp"

#include "io/atomic_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "meganeura/error.hpp"

namespace mn::train {
namespace {

const char* const kCsvHeader = "step,loss,eval_accuracy";
constexpr size_t kMaxPlotPoints = 2000;
constexpr double kWidth = 800, kHeight = 450;
constexpr double kLeft = 70, kRight = 730, kTop = 60, kBottom = 390;  // the plot frame; the legend above it
const char* const kLossColor = "#1f77b4";
const char* const kEvalColor = "#d62728";
constexpr double kSmoothing = 0.95;  // weight of the running average per step: about a 20-step window

struct Point {
    double x, y;
};

struct Axis {
    double lo, hi, tick;  // ticks at lo, lo + tick, ..., hi
};

std::string printf_string(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* pattern, ...) {
    char text[512];
    va_list args;
    va_start(args, pattern);
    std::vsnprintf(text, sizeof text, pattern, args);
    va_end(args);
    return text;
}

std::string shortest(float value) {
    char text[32];
    return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

std::string escape_xml(const std::string& text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

std::optional<float> parse_cell(const std::string& cell, const std::string& where) {
    if (cell.empty()) return std::nullopt;
    float value = 0;
    const auto [end, error] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
    if (error != std::errc() || end != cell.data() + cell.size())
        throw Error(where + ": \"" + cell + "\" is not a number");
    return value;
}

std::vector<Point> downsample(const std::vector<Point>& points) {
    const size_t bucket = (points.size() + kMaxPlotPoints - 1) / kMaxPlotPoints;
    if (bucket <= 1) return points;
    std::vector<Point> means;
    for (size_t begin = 0; begin < points.size(); begin += bucket) {
        const size_t end = std::min(points.size(), begin + bucket);
        Point sum{0, 0};
        for (size_t i = begin; i < end; ++i) sum = {sum.x + points[i].x, sum.y + points[i].y};
        means.push_back({sum.x / double(end - begin), sum.y / double(end - begin)});
    }
    return means;
}

// An axis covering [lo, hi] with round tick values; an empty range is widened first.
Axis nice_axis(double lo, double hi) {
    if (!(hi > lo)) {
        const double pad = std::max(0.5, std::abs(lo) * 0.05);
        lo -= pad;
        hi += pad;
    }
    const double raw = (hi - lo) / 5;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    const double r = raw / magnitude;
    const double tick = magnitude * (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10);
    return {std::floor(lo / tick) * tick, std::ceil(hi / tick) * tick, tick};
}

Axis axis_for(const std::vector<Point>& a, const std::vector<Point>& b, double Point::*coordinate) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto* series : {&a, &b})
        for (const Point& p : *series) {
            lo = std::min(lo, p.*coordinate);
            hi = std::max(hi, p.*coordinate);
        }
    return lo <= hi ? nice_axis(lo, hi) : nice_axis(0, 1);
}

// The per-step values' exponential moving average, debiased so the first points are not pulled to 0.
std::vector<Point> smoothed(const std::vector<Point>& points) {
    std::vector<Point> out;
    double average = 0, weight = 0;
    for (const Point& p : points) {
        average = kSmoothing * average + (1 - kSmoothing) * p.y;
        weight = kSmoothing * weight + (1 - kSmoothing);
        out.push_back({p.x, average / weight});
    }
    return out;
}

std::vector<double> ticks(const Axis& axis) {
    std::vector<double> values;
    for (int i = 0; axis.lo + i * axis.tick <= axis.hi + axis.tick * 1e-6; ++i) values.push_back(axis.lo + i * axis.tick);
    return values;
}

double to_x(const Axis& axis, double x) { return kLeft + (x - axis.lo) / (axis.hi - axis.lo) * (kRight - kLeft); }
double to_y(const Axis& axis, double y) { return kBottom - (y - axis.lo) / (axis.hi - axis.lo) * (kBottom - kTop); }

std::string polyline(const std::vector<Point>& points, const Axis& x, const Axis& y, const char* color,
                     double opacity = 1) {
    std::string coordinates;
    for (const Point& p : downsample(points))
        coordinates += printf_string("%s%.1f,%.1f", coordinates.empty() ? "" : " ", to_x(x, p.x), to_y(y, p.y));
    return printf_string("<polyline fill=\"none\" stroke=\"%s\" stroke-opacity=\"%g\" stroke-width=\"1.5\" points=\"",
                         color, opacity) +
           coordinates + "\"/>\n";
}

std::string markers(const std::vector<Point>& points, const Axis& x, const Axis& y, const char* color) {
    std::string out;
    for (const Point& p : points)
        out += printf_string("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", to_x(x, p.x), to_y(y, p.y), color);
    return out;
}

// One legend entry per series drawn, in a row between the title and the frame, where no data can be.
std::string legend(bool loss, bool eval) {
    struct Entry {
        const char* label;
        const char* color;
        double opacity;
        bool marker;
    };
    std::vector<Entry> entries;
    if (loss) entries.push_back({"loss per step", kLossColor, 0.3, false});
    if (loss) entries.push_back({"loss, moving average", kLossColor, 1, false});
    if (eval) entries.push_back({"test accuracy (right axis)", kEvalColor, 1, true});
    std::string out;
    const double y = kTop - 12, width = 200;
    for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& e = entries[i];
        const double left = kLeft + width * double(i);
        out += printf_string("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-opacity=\"%g\" "
                             "stroke-width=\"1.5\"/>\n",
                             left, y - 4, left + 24, y - 4, e.color, e.opacity);
        if (e.marker) out += printf_string("<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" fill=\"%s\"/>\n", left + 12, y - 4, e.color);
        out += printf_string("<text x=\"%g\" y=\"%g\">%s</text>\n", left + 30, y, e.label);
    }
    return out;
}

// Grid lines and labels of the step axis and the left (loss) axis, plus the right axis' labels.
std::string axes(const Axis& x, const Axis& loss, const Axis* eval) {
    std::string out;
    for (double t : ticks(x))
        out += printf_string("<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>\n"
                             "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>\n",
                             to_x(x, t), kTop, to_x(x, t), kBottom, to_x(x, t), kBottom + 16, t);
    for (double t : ticks(loss))
        out += printf_string("<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
                             "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                             kLeft, to_y(loss, t), kRight, to_y(loss, t), kLeft - 6, to_y(loss, t) + 4, t);
    out += printf_string("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n"
                         "<text transform=\"translate(18 %g) rotate(-90)\" text-anchor=\"middle\" fill=\"%s\">loss</text>\n",
                         (kLeft + kRight) / 2, kHeight - 14, (kTop + kBottom) / 2, kLossColor);
    if (!eval) return out;
    for (double t : ticks(*eval))
        out += printf_string("<text x=\"%g\" y=\"%.1f\" fill=\"%s\">%g</text>\n", kRight + 6, to_y(*eval, t) + 4,
                             kEvalColor, t);
    out += printf_string("<text transform=\"translate(%g %g) rotate(90)\" text-anchor=\"middle\" fill=\"%s\">"
                         "test accuracy</text>\n",
                         kWidth - 14, (kTop + kBottom) / 2, kEvalColor);
    return out;
}

}  // namespace

void LossCurve::add(int64_t step, float loss) { rows_[step].loss = loss; }

void LossCurve::add_eval(int64_t step, float accuracy) { rows_[step].accuracy = accuracy; }

void LossCurve::write_csv(const std::string& path) const {
    std::string text = std::string(kCsvHeader) + "\n";
    for (const auto& [step, row] : rows_)
        text += std::to_string(step) + "," + (row.loss ? shortest(*row.loss) : "") + "," +
                (row.accuracy ? shortest(*row.accuracy) : "") + "\n";
    io::write_file_atomically(path, {text});
}

LossCurve LossCurve::read_csv(const std::string& path) {
    std::ifstream file(path);
    if (!file) throw Error("cannot read " + path + ": " + std::strerror(errno));
    std::string line;
    if (!std::getline(file, line) || line != kCsvHeader)
        throw Error(path + ": expected the header \"" + std::string(kCsvHeader) + "\"");
    LossCurve curve;
    for (int number = 2; std::getline(file, line); ++number) {
        const std::string where = path + ":" + std::to_string(number);
        const size_t first = line.find(','), second = line.find(',', first + 1);
        if (first == std::string::npos || second == std::string::npos || line.find(',', second + 1) != std::string::npos)
            throw Error(where + ": expected three comma-separated cells");
        int64_t step = 0;
        const auto [end, error] = std::from_chars(line.data(), line.data() + first, step);
        if (error != std::errc() || end != line.data() + first) throw Error(where + ": bad step");
        Row& row = curve.rows_[step];
        row.loss = parse_cell(line.substr(first + 1, second - first - 1), where);
        row.accuracy = parse_cell(line.substr(second + 1), where);
    }
    return curve;
}

void LossCurve::write_svg(const std::string& path, const std::string& title) const {
    std::vector<Point> loss, eval;
    for (const auto& [step, row] : rows_) {
        if (row.loss && std::isfinite(*row.loss)) loss.push_back({double(step), *row.loss});
        if (row.accuracy && std::isfinite(*row.accuracy)) eval.push_back({double(step), *row.accuracy});
    }
    const Axis x = axis_for(loss, eval, &Point::x);
    const bool nonnegative = std::all_of(loss.begin(), loss.end(), [](const Point& p) { return p.y >= 0; });
    const Axis loss_axis = axis_for(loss, nonnegative ? std::vector<Point>{{0, 0}} : std::vector<Point>{}, &Point::y);
    const Axis eval_axis{0, 1, 0.2};

    std::string svg = printf_string(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
        "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        kWidth, kHeight, kWidth, kHeight);
    svg += printf_string("<text x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">", kWidth / 2) +
           escape_xml(title) + "</text>\n";
    svg += axes(x, loss_axis, eval.empty() ? nullptr : &eval_axis);
    svg += printf_string("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n",
                         kLeft, kTop, kRight - kLeft, kBottom - kTop);
    if (!loss.empty()) svg += polyline(loss, x, loss_axis, kLossColor, 0.3) + polyline(smoothed(loss), x, loss_axis, kLossColor);
    if (eval.size() > 1) svg += polyline(eval, x, eval_axis, kEvalColor);
    svg += markers(eval, x, eval_axis, kEvalColor);
    svg += legend(!loss.empty(), !eval.empty());
    if (loss.empty() && eval.empty())
        svg += printf_string("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">no data</text>\n",
                             (kLeft + kRight) / 2, (kTop + kBottom) / 2);
    svg += "</svg>\n";
    io::write_file_atomically(path, {svg});
}

}  // namespace mn::train
