#pragma once
// A command's options, declared once with their defaults and help, and the parser that reads them:
// positional words, `--name value` and `--name=value`; an unknown option or a missing value is an
// mn::Error naming it. An option whose default is "false" is a switch: `--name` alone sets it
// (`--name=false` clears it). `-m X` is `--model X` where a command has --model. The same declaration
// prints `meganeura <command> --help`.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "meganeura/error.hpp"

namespace mn::cli {

using Args = std::vector<std::string>;

struct Option {
    std::string name;           // without "--"
    std::string default_value;  // "" for none (a required option says so in its help); "false": a switch
    std::string metavar;        // what the value is, e.g. "N" or "FILE"; empty for a switch
    std::string help;
};

class Flags {
public:
    Flags(const Args& args, const std::vector<Option>& options) {
        for (const Option& o : options) values_[o.name] = o.default_value;
        for (size_t i = 0; i < args.size(); ++i) {
            const bool short_model = args[i] == "-m" && values_.count("model");  // llama.cpp's -m
            if (args[i].rfind("--", 0) != 0 && !short_model) {
                positional_.push_back(args[i]);
                continue;
            }
            const size_t equals = short_model ? std::string::npos : args[i].find('=');
            const std::string name = short_model ? "model"
                                     : args[i].substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
            auto it = values_.find(name);
            if (it == values_.end()) {
                std::string known;
                for (const Option& o : options) known += " --" + o.name;
                throw Error("unknown option --" + name + "; options:" + (known.empty() ? " none" : known));
            }
            given_.insert(name);
            const bool is_switch = switch_default(options, name);
            if (equals != std::string::npos) {
                it->second = args[i].substr(equals + 1);
                if (is_switch && it->second != "true" && it->second != "false")
                    throw Error("option --" + name + " is a switch: --" + name + "=true or --" + name + "=false");
            } else if (is_switch) {
                it->second = "true";
            } else {
                if (i + 1 >= args.size()) throw Error("option --" + name + " needs a value");
                it->second = args[++i];
            }
        }
    }
    const std::vector<std::string>& positional() const { return positional_; }
    const std::string& str(const std::string& name) const { return values_.at(name); }
    bool on(const std::string& name) const { return values_.at(name) == "true"; }
    // Whether the command line gave the option (its value may still equal the default).
    bool given(const std::string& name) const { return given_.count(name) > 0; }
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
    // The value, which must be one of `choices` (an mn::Error listing them otherwise).
    const std::string& choice(const std::string& name, const std::vector<std::string>& choices) const {
        const std::string& v = values_.at(name);
        std::string list;
        for (const std::string& c : choices) {
            if (v == c) return v;
            list += (list.empty() ? "" : ", ") + c;
        }
        throw Error("option --" + name + " is '" + v + "', expected one of " + list);
    }
    // The value, which must not be empty.
    const std::string& required(const std::string& name) const {
        const std::string& v = values_.at(name);
        if (v.empty()) throw Error("option --" + name + " is required");
        return v;
    }

private:
    static bool switch_default(const std::vector<Option>& options, const std::string& name) {
        for (const Option& o : options)
            if (o.name == name) return o.default_value == "false";
        return false;
    }
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
    std::set<std::string> given_;
    std::vector<std::string> positional_;
};

// One `meganeura` subcommand: what `meganeura <name> --help` prints, and the function that runs it
// with the parsed flags. `run` returns the exit code and reports bad input by throwing mn::Error.
struct Command {
    std::string name;
    std::string positional;  // the words before the options in the usage line, e.g. "fashion-mnist"
    std::string summary;     // one line, for `meganeura --help`
    std::string description; // a paragraph, for `meganeura <name> --help`
    std::vector<Option> options;
    int (*run)(const Flags& flags);
};

// The text of `meganeura <command> --help`: usage, description, and every option with its default.
inline std::string help_text(const Command& c) {
    std::string text = "usage: meganeura " + c.name + (c.positional.empty() ? "" : " " + c.positional) +
                       (c.options.empty() ? "" : " [options]") + "\n\n" + c.description + "\n\noptions:\n";
    auto line = [&](const std::string& left, const std::string& help) {
        text += "  " + left + std::string(left.size() < 24 ? 24 - left.size() : 1, ' ') + help + "\n";
    };
    for (const Option& o : c.options) {
        const bool is_switch = o.default_value == "false";
        std::string help = o.help;
        if (!is_switch && !o.default_value.empty()) help += " (default: " + o.default_value + ")";
        line("--" + o.name + (is_switch ? "" : " " + o.metavar), help);
    }
    line("-h, --help", "show this help and exit");
    return text;
}

}  // namespace mn::cli
