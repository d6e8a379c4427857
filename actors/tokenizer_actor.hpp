#pragma once
// The tokenizer actor: takes (generate_atom, WireMessage{GenerateRequest},
// client), renders chat messages through the model's template, encodes, and
// sends the TokenizedRequest both to the detokenizer (registration of the
// client and its stop strings) and to `scheduler` (the local scheduler, or
// the head's router in a cluster). Bad requests get an error TextDelta.
//
// Where special-token text (e.g. "<|im_start|>") becomes special tokens:
//   - messages: only in the template's own markup. In roles and contents
//     (client text) it is encoded as plain characters, so a user cannot
//     forge system or assistant turns, unless special_tokens_in_content
//     (trusted callers only: then message text may open and close turns);
//   - text (/generate's text, /v1/completions' prompt): never; the text is
//     encoded as the characters it is made of, with BOS when the model adds
//     one. (Peers such as llama.cpp's server parse specials there; this
//     path has not, and a caller who wants exact control sends input_ids.)
//   - input_ids: taken as given (checked against the vocabulary).

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <string>

#include "grammar/constraint.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {

// chat_template: Jinja source used instead of the model's own (empty: the
// model's). One that cannot be used makes every chat request fail with why.
// constraints: the scheduler's structured-output compiler, if it is in this
// process: a request's grammar is compiled (and cached) here, off the
// scheduler's thread, and one that does not compile is refused here.
caf::actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tok, caf::actor scheduler,
                           caf::actor detokenizer, bool special_tokens_in_content = false,
                           std::string chat_template = {}, std::shared_ptr<ConstraintCompiler> constraints = {});

}  // namespace actorlm
