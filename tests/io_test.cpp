// safetensors and IDX: round trips, conversions, and the error for every kind of broken file.
// Broken safetensors files are written by hand (length, JSON text, data) so each test states
// exactly which byte is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "error_of.hpp"
#include "io/atomic_file.hpp"
#include "temp_dir.hpp"
#include "io/idx.hpp"
#include "io/safetensors.hpp"
#include "meganeura/error.hpp"

namespace fs = std::filesystem;
using mn::io::TensorData;
using mn::io::TensorMap;

namespace {

class IoTest : public ::testing::Test {
protected:
    std::string path(const std::string& name) const { return tmp_.path(name); }

    std::vector<std::string> listing() const {
        std::vector<std::string> names;
        for (auto& entry : fs::directory_iterator(tmp_.dir())) names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }

    // A safetensors file from raw parts: 8-byte little-endian length, header text, data.
    std::string write_raw(const std::string& name, const std::string& header,
                          const std::vector<uint8_t>& data) {
        std::string bytes(8, '\0');
        for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(header.size()) >> (8 * i));
        bytes += header + std::string(data.begin(), data.end());
        return write_bytes(name, bytes);
    }

    std::string write_bytes(const std::string& name, const std::string& bytes) {
        std::ofstream(path(name), std::ios::binary) << bytes;
        return path(name);
    }

    mn::test::TempDir tmp_{"io"};
};

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

std::string read_error(const std::string& file) {
    try {
        mn::io::read_safetensors(file);
    } catch (const mn::Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected mn::Error reading " << file;
    return "";
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "\"" << part << "\" is not in:\n" << text;
}
#define EXPECT_HAS(text, part) EXPECT_TRUE(contains(text, part))

}  // namespace

// ---- safetensors: round trips and conversions ---------------------------------------------------

TEST_F(IoTest, RoundTripIsBitExactWithMetadataAndAlignment) {
    TensorMap tensors;
    tensors["fc1.weight"] = TensorData::from_f32({2, 3}, {1.5f, -0.0f, std::bit_cast<float>(0x7fc00001u),
                                                          std::numeric_limits<float>::infinity(), 1e-42f, 3});
    tensors["fc1.bias"] = TensorData::from_f32({3}, {0.25f, -7, 1e30f});
    tensors["labels"] = TensorData::from_i32({4}, {0, -1, 2147483647, -2147483647 - 1});
    tensors["scalar"] = TensorData::from_f32({}, {42});
    tensors["empty"] = TensorData::from_f32({0, 5}, {});
    tensors["half"] = {"F16", {3}, raw<uint16_t>({0x3c00, 0x8001, 0x7bff})};
    tensors["step"] = {"I64", {1}, raw<int64_t>({1234567890123})};
    tensors["mask"] = {"U8", {5}, {1, 0, 1, 1, 0}};
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "17"}};
    const std::string file = path("model.safetensors");
    mn::io::write_safetensors(file, tensors, metadata);

    const TensorMap back = mn::io::read_safetensors(file);
    ASSERT_EQ(back.size(), tensors.size());
    for (const auto& [name, tensor] : tensors) {
        ASSERT_TRUE(back.count(name)) << name;
        EXPECT_EQ(back.at(name).dtype, tensor.dtype) << name;
        EXPECT_EQ(back.at(name).shape, tensor.shape) << name;
        EXPECT_EQ(back.at(name).bytes, tensor.bytes) << name;
    }
    EXPECT_EQ(mn::io::read_safetensors_metadata(file), metadata);
    EXPECT_EQ(back.at("labels").to_i32()[3], -2147483647 - 1);
    EXPECT_EQ(back.at("scalar").numel(), 1);

    // The header is padded to 8 bytes and every tensor starts aligned to its element size.
    std::ifstream in(file, std::ios::binary);
    uint64_t header_size = 0;
    in.read(reinterpret_cast<char*>(&header_size), 8);
    EXPECT_EQ(header_size % 8, 0u);
    std::string text(header_size, '\0');
    in.read(text.data(), std::streamsize(header_size));
    const std::map<std::string, size_t> sizes = {{"F32", 4}, {"I32", 4}, {"F16", 2}, {"I64", 8}, {"U8", 1}};
    const nlohmann::json header = nlohmann::json::parse(text);
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        EXPECT_EQ(entry["data_offsets"][0].get<uint64_t>() % sizes.at(entry["dtype"]), 0u) << name;
    }
    EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(IoTest, WithoutMetadataThereIsNoMetadataBlock) {
    const std::string file = path("plain.safetensors");
    mn::io::write_safetensors(file, {{"w", TensorData::from_f32({1}, {1})}});
    EXPECT_TRUE(mn::io::read_safetensors_metadata(file).empty());
}

TEST_F(IoTest, ConvertsHandWrittenF16BF16I64) {
    std::vector<uint8_t> data =
        raw<uint16_t>({0x3c00, 0xc000, 0x7bff, 0x0001, 0x0200, 0x8000, 0x7c00, 0xfc00, 0x7e00});
    const std::vector<uint8_t> bf16 = raw<uint16_t>({0x3f80, 0xc060, 0x7f80, 0x0001});
    const std::vector<uint8_t> i64 = raw<int64_t>({-5, 2147483647, -2147483648LL});
    data.insert(data.end(), bf16.begin(), bf16.end());
    data.insert(data.end(), i64.begin(), i64.end());
    const std::string file = write_raw("hand.safetensors",
                                       R"({"h":{"dtype":"F16","shape":[9],"data_offsets":[0,18]},)"
                                       R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[18,26]},)"
                                       R"("i":{"dtype":"I64","shape":[3],"data_offsets":[26,50]}})",
                                       data);
    const TensorMap tensors = mn::io::read_safetensors(file);

    const std::vector<float> h = tensors.at("h").to_f32();
    EXPECT_EQ(h[0], 1.0f);
    EXPECT_EQ(h[1], -2.0f);
    EXPECT_EQ(h[2], 65504.0f);
    EXPECT_EQ(h[3], std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(h[4], std::ldexp(1.0f, -15));  // largest-bit subnormal
    EXPECT_TRUE(h[5] == 0.0f && std::signbit(h[5]));
    EXPECT_EQ(h[6], std::numeric_limits<float>::infinity());
    EXPECT_EQ(h[7], -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(h[8]));

    const std::vector<float> b = tensors.at("b").to_f32();
    EXPECT_EQ(b, (std::vector<float>{1.0f, -3.5f, std::numeric_limits<float>::infinity(),
                                     std::bit_cast<float>(0x00010000u)}));
    EXPECT_EQ(tensors.at("i").to_i32(), (std::vector<int32_t>{-5, 2147483647, -2147483647 - 1}));
}

TEST_F(IoTest, ConversionsRejectWhatTheyCannotRepresent) {
    const TensorData big{"I64", {2}, raw<int64_t>({1, 2147483648LL})};
    try {
        big.to_i32("step");
        FAIL();
    } catch (const mn::Error& error) {
        EXPECT_HAS(error.what(), "step");
        EXPECT_HAS(error.what(), "2147483648");
        EXPECT_HAS(error.what(), "index 1");
    }
    EXPECT_THROW(big.to_f32(), mn::Error);
    EXPECT_THROW((TensorData{"F64", {1}, raw<double>({1.0})}.to_f32()), mn::Error);
    EXPECT_THROW((TensorData{"U8", {1}, {1}}.to_i32()), mn::Error);
    EXPECT_THROW(TensorData::from_f32({2}, {1, 2, 3}).to_f32(), mn::Error);
    EXPECT_THROW((TensorData{"F32", {2}, {0, 0, 0}}.to_f32()), mn::Error);  // 3 bytes for 2 floats
}

TEST_F(IoTest, ReadsOtherDtypesAsBytes) {
    const std::string file = write_raw("misc.safetensors",
                                       R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                                       R"("m":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]},)"
                                       R"("q":{"dtype":"I8","shape":[1],"data_offsets":[10,11]}})",
                                       std::vector<uint8_t>(11, 1));
    const TensorMap tensors = mn::io::read_safetensors(file);
    EXPECT_EQ(tensors.at("d").bytes.size(), 8u);
    EXPECT_EQ(tensors.at("m").shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(tensors.at("q").dtype, "I8");
}

// ---- safetensors: broken files ------------------------------------------------------------------

TEST_F(IoTest, MissingFileNamesThePath) {
    EXPECT_HAS(read_error(path("nope.safetensors")), "nope.safetensors");
}

TEST_F(IoTest, TruncatedFileNamesHeaderOrTensor) {
    const std::string file = path("full.safetensors");
    mn::io::write_safetensors(file, {{"a", TensorData::from_f32({4}, {1, 2, 3, 4})},
                                     {"b", TensorData::from_f32({4}, {5, 6, 7, 8})}});
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t header_size = 0;
    std::memcpy(&header_size, bytes.data(), 8);
    const size_t data_start = 8 + header_size;

    EXPECT_HAS(read_error(write_bytes("cut0", "")), "too short");
    EXPECT_HAS(read_error(write_bytes("cut5", bytes.substr(0, 5))), "too short");
    for (size_t cut : {size_t(8), size_t(8 + header_size / 2), data_start - 1}) {
        const std::string message = read_error(write_bytes("cut", bytes.substr(0, cut)));
        EXPECT_HAS(message, "header needs bytes 8.." + std::to_string(data_start));
        EXPECT_HAS(message, "file ends at byte " + std::to_string(cut));
    }
    EXPECT_HAS(read_error(write_bytes("cut", bytes.substr(0, data_start + 3))),
               "tensor 'a' needs bytes 0..16");
    const std::string last = read_error(write_bytes("cut", bytes.substr(0, bytes.size() - 1)));
    EXPECT_HAS(last, "cut: tensor 'b' needs bytes 16..32 of the data section");
    EXPECT_HAS(last, "ends at byte 31");
}

TEST_F(IoTest, BadJsonHeader) {
    EXPECT_HAS(read_error(write_raw("bad.safetensors", "{not json", {})), "not valid JSON");
    EXPECT_HAS(read_error(write_raw("array.safetensors", "[1, 2]", {})), "expected a JSON object");
    EXPECT_HAS(read_error(write_raw("meta.safetensors", R"({"__metadata__": 3})", {})), "__metadata__");
    EXPECT_HAS(read_error(write_raw("entry.safetensors", R"({"w": 3})", {})), "tensor 'w'");
}

TEST_F(IoTest, MissingOrInvalidFieldsNameTensorAndField) {
    const std::vector<uint8_t> data(16);
    auto error_for = [&](const std::string& entry) {
        return read_error(write_raw("fields.safetensors", R"({"fc1.weight": )" + entry + "}", data));
    };
    EXPECT_HAS(error_for(R"({"shape":[4],"data_offsets":[0,16]})"), "tensor 'fc1.weight' has no \"dtype\"");
    EXPECT_HAS(error_for(R"({"dtype":"F32","data_offsets":[0,16]})"), "has no \"shape\"");
    EXPECT_HAS(error_for(R"({"dtype":"F32","shape":[4]})"), "has no \"data_offsets\"");
    EXPECT_HAS(error_for(R"({"dtype":"F8","shape":[4],"data_offsets":[0,16]})"), "unsupported dtype \"F8\"");
    EXPECT_HAS(error_for(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"), "non-negative");
    EXPECT_HAS(error_for(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})"), "expected [begin, end]");
    EXPECT_HAS(error_for(R"({"dtype":"F32","shape":[3],"data_offsets":[0,16]})"), "span 16 bytes");
    EXPECT_HAS(error_for(R"({"dtype":"F32","shape":[4],"data_offsets":[16,0]})"), "begin after end");
}

TEST_F(IoTest, OffsetsOutOfRangeOrOverlapping) {
    const std::vector<uint8_t> data(24);
    EXPECT_HAS(read_error(write_raw("range.safetensors",
                                    R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data)),
               "tensor 'w' needs bytes 0..32 of the data section but the data section ends at byte 24");
    const std::string overlap =
        read_error(write_raw("overlap.safetensors",
                             R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                             data));
    EXPECT_HAS(overlap, "'a' (bytes 0..16) and 'b' (bytes 8..24) overlap");
}

// ---- safetensors: atomic save -------------------------------------------------------------------

TEST_F(IoTest, SaveIntoMissingDirectoryFails) {
    EXPECT_THROW(mn::io::write_safetensors(path("missing/model.safetensors"), {}), mn::Error);
    EXPECT_TRUE(listing().empty());
}

TEST_F(IoTest, FailedSaveKeepsOldFileAndLeavesNoTemporary) {
    const std::string file = path("model.safetensors");
    mn::io::write_safetensors(file, {{"w", TensorData::from_f32({2}, {1, 2})}});
    EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});

    // Invalid tensor: rejected before anything is written.
    EXPECT_THROW(mn::io::write_safetensors(file, {{"w", TensorData{"F32", {2}, {1, 2, 3}}}}), mn::Error);

    // The rename fails (the target is a directory): the temporary file is removed again.
    fs::create_directory(path("folder.safetensors"));
    EXPECT_THROW(mn::io::write_safetensors(path("folder.safetensors"), {}), mn::Error);
    EXPECT_EQ(listing(), (std::vector<std::string>{"folder.safetensors", "model.safetensors"}));

    mn::io::write_safetensors(file, {{"w", TensorData::from_f32({2}, {3, 4})}});
    EXPECT_EQ(mn::io::read_safetensors(file).at("w").to_f32(), (std::vector<float>{3, 4}));
    EXPECT_EQ(listing(), (std::vector<std::string>{"folder.safetensors", "model.safetensors"}));
}

// A symlink planted at the temporary file's name would redirect the save (LESSONS: the writer used
// fopen("wb")); a taken name is skipped, never opened, and what it points at is untouched.
TEST_F(IoTest, TempNamesTakenBySomeoneElseAreSkippedNotFollowed) {
    const std::string file = path("model.safetensors"), victim = path("victim");
    std::ofstream(victim) << "precious";
    const std::string stem = file + ".tmp." + std::to_string(getpid()) + ".";
    fs::create_symlink(victim, stem + "0");
    fs::create_directory(stem + "1");
    mn::io::write_safetensors(file, {{"w", TensorData::from_f32({2}, {3, 4})}});
    EXPECT_EQ(mn::io::read_safetensors(file).at("w").to_f32(), (std::vector<float>{3, 4}));
    std::stringstream kept;
    kept << std::ifstream(victim).rdbuf();
    EXPECT_EQ(kept.str(), "precious");
    EXPECT_TRUE(fs::is_symlink(stem + "0"));  // ours by name, but a live process's: left alone
    EXPECT_TRUE(fs::is_directory(stem + "1"));
}

// A 0600 checkpoint stayed 0600 only until the next save, which made it 0644 (the umask's default).
TEST_F(IoTest, SaveKeepsTheTargetsPermissions) {
    const std::string file = path("model.safetensors");
    for (const mode_t mode : {mode_t(0600), mode_t(0666)}) {  // 0666: more than the umask lets open() give
        mn::io::write_safetensors(file, {});
        ASSERT_EQ(chmod(file.c_str(), mode), 0);
        mn::io::write_safetensors(file, {{"w", TensorData::from_f32({1}, {1})}});
        struct stat st;
        ASSERT_EQ(stat(file.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, mode);
    }
}

// A save killed mid-write left "<path>.tmp.<pid>" behind for ever.
TEST_F(IoTest, StaleTemporariesOfExitedProcessesAreRemoved) {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    ASSERT_GT(child, 0);
    ASSERT_EQ(waitpid(child, nullptr, 0), child);
    const std::string dead = std::to_string(child), live = std::to_string(getpid());
    for (const std::string name : {"model.safetensors.tmp." + dead + ".0", "model.safetensors.tmp." + dead,
                                   "model.safetensors.tmp." + live + ".5", "other.safetensors.tmp." + dead + ".0",
                                   "model.safetensors.tmp." + dead + ".x"})
        std::ofstream(path(name)) << "partial";
    mn::io::write_safetensors(path("model.safetensors"), {});
    std::vector<std::string> kept = {"model.safetensors", "model.safetensors.tmp." + dead + ".x",
                                     "model.safetensors.tmp." + live + ".5", "other.safetensors.tmp." + dead + ".0"};
    std::sort(kept.begin(), kept.end());
    EXPECT_EQ(listing(), kept);
}

TEST_F(IoTest, OutputPathsAreCheckedBeforeAnyWork) {
    EXPECT_EQ(mn::test::error_of([&] { mn::io::check_can_write(path("missing/out.safetensors"), "--out"); }),
              "--out " + path("missing/out.safetensors") + ": the folder " + path("missing") + " does not exist");
    EXPECT_EQ(mn::test::error_of([&] { mn::io::check_can_write(tmp_.dir().string(), "--out"); }),
              "--out " + tmp_.dir().string() + ": is a folder");
    EXPECT_EQ(mn::test::error_of([&] { mn::io::check_can_write(path("out.safetensors"), "--out"); }), "");
}

// Deep nesting crashed every reader of a header (printing a nested value recursed off the stack),
// and 1e999 escaped as an internal error.
TEST_F(IoTest, NestedOrOutOfRangeJsonIsAnError) {
    const std::string deep = write_raw("deep.safetensors", "{\"__metadata__\": {\"a\": " + std::string(50000, '[') +
                                                                std::string(50000, ']') + "}}", {});
    EXPECT_HAS(read_error(deep), "deep.safetensors: header: JSON nested deeper than 64 levels");
    const std::string shallow = write_raw("ok.safetensors", "{\"__metadata__\": {\"a\": [[[1]]]}}", {});
    EXPECT_EQ(mn::io::read_safetensors_metadata(shallow).at("a"), "[[[1]]]");
    const std::string huge = write_raw("huge.safetensors", R"({"w": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 4]}})", {});
    EXPECT_HAS(read_error(huge), "huge.safetensors: header: not valid JSON");
    EXPECT_HAS(read_error(huge), "1e999");
    EXPECT_HAS(read_error(tmp_.dir().string()), "not a regular file");
}

// ---- IDX ----------------------------------------------------------------------------------------

namespace {

std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, size_t data_size) {
    std::string bytes = {0, 0, char(type), char(dims.size())};
    for (uint32_t dim : dims)
        for (int shift : {24, 16, 8, 0}) bytes += char(dim >> shift);
    for (size_t i = 0; i < data_size; ++i) bytes += char(i * 7);
    return bytes;
}

void write_gz(const std::string& file, const std::string& bytes) {
    gzFile out = gzopen(file.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(gzwrite(out, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    ASSERT_EQ(gzclose(out), Z_OK);
}

std::string idx_error(const std::string& file) {
    try {
        mn::io::read_idx(file);
    } catch (const mn::Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected mn::Error reading " << file;
    return "";
}

}  // namespace

TEST_F(IoTest, IdxReadsGzipAndPlain) {
    const std::string bytes = idx_bytes(0x08, {2, 3, 4}, 24);
    write_gz(path("a-idx3-ubyte.gz"), bytes);
    write_bytes("a-idx3-ubyte", bytes);
    for (const std::string name : {"a-idx3-ubyte.gz", "a-idx3-ubyte"}) {
        const mn::io::IdxArray array = mn::io::read_idx(path(name));
        EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3, 4})) << name;
        ASSERT_EQ(array.data.size(), 24u) << name;
        EXPECT_EQ(array.data[23], uint8_t(23 * 7)) << name;
    }
}

TEST_F(IoTest, IdxErrors) {
    EXPECT_HAS(idx_error(path("missing.gz")), "missing.gz");
    std::string bad_magic = idx_bytes(0x08, {4}, 4);
    bad_magic[0] = 1;
    write_gz(path("magic.gz"), bad_magic);
    EXPECT_HAS(idx_error(path("magic.gz")), "not an IDX file");
    write_gz(path("float.gz"), idx_bytes(0x0D, {4}, 16));
    EXPECT_HAS(idx_error(path("float.gz")), "0x0D (float32)");
    write_gz(path("short.gz"), idx_bytes(0x08, {2, 3, 4}, 20));
    EXPECT_HAS(idx_error(path("short.gz")), "truncated: expected 24 data bytes, got 20");
    write_gz(path("header.gz"), idx_bytes(0x08, {2, 3, 4}, 0).substr(0, 9));
    EXPECT_HAS(idx_error(path("header.gz")), "truncated");
    write_gz(path("long.gz"), idx_bytes(0x08, {2}, 3));
    EXPECT_HAS(idx_error(path("long.gz")), "trailing data: expected 2 data bytes, the file holds more");
}

// The whole stream used to be inflated before the header was read: a small file that inflates to
// gigabytes cost them all. Now the header bounds what is read, and a header that lies costs nothing.
TEST_F(IoTest, IdxHeaderBoundsTheInflation) {
    write_gz(path("bomb.gz"), idx_bytes(0x08, {2}, 2) + std::string(64 << 20, '\0'));
    EXPECT_HAS(idx_error(path("bomb.gz")), "bomb.gz: trailing data: expected 2 data bytes");
    write_gz(path("liar.gz"), idx_bytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF}, 10));
    EXPECT_HAS(idx_error(path("liar.gz")), "liar.gz: truncated: expected 18446744065119617025 data bytes, got 10");
    write_gz(path("overflow.gz"), idx_bytes(0x08, {1u << 31, 1u << 31, 4}, 10));  // 2^64: wraps to 0
    EXPECT_HAS(idx_error(path("overflow.gz")), "multiply to more than 2^64 bytes");
    write_gz(path("empty.gz"), idx_bytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 2, 0}, 0));
    EXPECT_EQ(mn::io::read_idx(path("empty.gz")).data.size(), 0u);  // a later 0 still wins
}

TEST_F(IoTest, FashionMnistIfInstalled) {
    const std::string images = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
    const std::string labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
    if (!fs::exists(images) || !fs::exists(labels)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    EXPECT_EQ(mn::io::read_idx(images).shape, (std::vector<int64_t>{60000, 28, 28}));
    const mn::io::IdxArray label_array = mn::io::read_idx(labels);
    EXPECT_EQ(label_array.shape, (std::vector<int64_t>{60000}));
    EXPECT_LE(*std::max_element(label_array.data.begin(), label_array.data.end()), 9);
}
