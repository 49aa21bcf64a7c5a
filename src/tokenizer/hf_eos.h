// Which token of a Hugging Face tokenizer.json is the EOS (the document separator packing puts
// between documents). Found with certainty or refused, never guessed, in this order:
//   1. an explicit token text (echo_prep --eos-token), resolved through the tokenizer;
//   2. the first of <|endoftext|>, <|end_of_text|>, </s>, <eos> that is a *special added token*;
//   3. the eos_token of the tokenizer_config.json beside the tokenizer.json (a string, or an
//      object with "content"), which must resolve to a token;
//   4. otherwise an InputError naming the files and the flag to pass.
// Why only special added tokens in step 2: an ordinary vocab entry spelled "</s>" is a merged
// piece of text (HTML has plenty), which BPE emits inside documents; an added token is never
// split or produced by merges, and `special` marks it a control token (the tokenizers library
// drops it under skip_special_tokens), as every real EOS is. A non-special added token is a user
// extension of the vocabulary (a domain word), so it is not taken either.
// Why step 2 before step 3: Qwen's tokenizer_config.json names the chat-turn end <|im_end|> as
// eos_token, but pretraining documents are separated by <|endoftext|>, which packing needs.
#pragma once

#include <cstdint>
#include <string>

namespace echo::tokenizer {

class HfTokenizer;

struct EosRule {
  std::string eos_token;              // step 1 when not empty (the token's text)
  std::string tokenizer_config_path;  // step 3 reads it when it exists; empty: no such file
};

struct EosChoice {
  int32_t id = -1;
  std::string source;  // for the log: "special added token \"<|endoftext|>\"", ...
};

// Applies the rule to `tok`, whose tokenizer.json `origin` names in messages.
EosChoice choose_eos(const HfTokenizer& tok, const std::string& origin, const EosRule& rule);

}  // namespace echo::tokenizer
