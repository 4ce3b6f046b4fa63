#pragma once
// A small command-line parser: positional words and `--name value` options, each option declared
// with its default; an unknown option or a missing value is an mn::Error naming it. An option whose
// default is "false" is a switch: it takes no value, and `--name` alone sets it.
#include <map>
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
    int64_t integer(const std::string& name) const { return std::stoll(number(name)); }
    double real(const std::string& name) const { return std::stod(number(name)); }
    bool on(const std::string& name) const { return values_.at(name) == "true"; }

private:
    const std::string& number(const std::string& name) const {
        const std::string& v = values_.at(name);
        size_t used = 0;
        try {
            (void)std::stod(v, &used);
        } catch (const std::exception&) {
        }
        if (v.empty() || used != v.size()) throw Error("option --" + name + " needs a number, got '" + v + "'");
        return v;
    }
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

}  // namespace mn::cli
