#pragma once
// A small command-line parser: positional words and `--name value` options, each option declared
// with its default; an unknown option or a missing value is an mn::Error naming it. An option whose
// default is "false" is a switch: it takes no value, and `--name` alone sets it.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "meganeura/error.hpp"

namespace mn::cli {

class Flags {
public:
    // `options` maps each accepted option (without "--") to its default value.
    Flags(const Args& args, std::map<std::string, std::string> options) : values_(std::move(options)) {
        for (size_t i = 0; i < args.size(); ++i) {
            if (args[i].rfind("--", 0) != 0) {
                positional_.push_back(args[i]);
                continue;
            }
            const std::string name = args[i].substr(2);
            if (!values_.count(name)) {
                std::string known;
                for (const auto& [k, v] : values_) known += " --" + k;
                throw Error("unknown option --" + name + "; options:" + known);
            }
            if (values_[name] == "false") {
                values_[name] = "true";
                continue;
            }
            if (i + 1 >= args.size()) throw Error("option --" + name + " needs a value");
            values_[name] = args[++i];
        }
    }
    const std::vector<std::string>& positional() const { return positional_; }
    const std::string& str(const std::string& name) const { return values_.at(name); }
    bool on(const std::string& name) const { return values_.at(name) == "true"; }
    // Numbers are parsed whole, in range, or not at all: "1e3" is not an integer, "nan" and "inf"
    // are not reals, and 99999999999999999999 is an error rather than a saturated or wrapped value.
    int64_t integer(const std::string& name, int64_t min = std::numeric_limits<int64_t>::lowest(),
                    int64_t max = std::numeric_limits<int64_t>::max()) const {
        const std::string& v = values_.at(name);
        int64_t value = 0;
        const auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), value);
        if (v.empty() || error == std::errc::invalid_argument || end != v.data() + v.size())
            throw Error("option --" + name + " needs an integer, got '" + v + "'");
        if (error == std::errc::result_out_of_range || value < min || value > max) throw out_of_range(name, min, max);
        return value;
    }
    // A finite real number in [min, max].
    double real(const std::string& name, double min = std::numeric_limits<double>::lowest(),
                double max = std::numeric_limits<double>::max()) const {
        const std::string& v = values_.at(name);
        double value = 0;
        const auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), value);
        if (v.empty() || error == std::errc::invalid_argument || end != v.data() + v.size() || std::isnan(value))
            throw Error("option --" + name + " needs a number, got '" + v + "'");
        if (error == std::errc::result_out_of_range || !std::isfinite(value) || value < min || value > max)
            throw out_of_range(name, min, max);
        return value;
    }

private:
    template <class T>
    Error out_of_range(const std::string& name, T min, T max) const {
        auto text = [](T bound) {
            std::ostringstream out;
            out << bound;
            return out.str();
        };
        std::string range = "a finite number";
        const bool low = min != std::numeric_limits<T>::lowest(), high = max != std::numeric_limits<T>::max();
        if (low && high) range = "from " + text(min) + " to " + text(max);
        else if (low) range = "at least " + text(min);
        else if (high) range = "at most " + text(max);
        return Error("option --" + name + " is " + values_.at(name) + ", expected " + range);
    }
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

}  // namespace mn::cli
