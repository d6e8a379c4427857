#pragma once
// Tools for debugging prompts without running a model (llama.cpp's
// llama-tokenize and --verbose-prompt, as commands of their own).

namespace actorlm {

// `actorlm tokenize --model FILE (-p TEXT | -f FILE) [--no-parse-special]
// [--no-bos] [--pieces]`: the ids the engine would use, on one line. Reads
// only the vocabulary (vocabulary-only GGUFs work).
int tokenize_command(int argc, char** argv, int first);

// `actorlm template (--model FILE | --template-file JINJA) (--messages JSON |
// --messages-file FILE) [...]`: exactly the prompt text the chat template
// renders, nothing else on stdout.
int template_command(int argc, char** argv, int first);

}  // namespace actorlm
