"""Prompt ids without a tokenizer.

The chat prompt (docs/background.md, "Chat prompt") is

    <|im_start|>system\\nYou are a helpful assistant.\\n<|im_end|>\\n<|im_start|>user\\n<image 1><img>
    {<IMG_CONTEXT> x N}</img>{QUERY}<|im_end|>\\n<|im_start|>assistant\\n

Added tokens are matched whole before BPE, so the text between two of them is encoded on
its own. This module takes added-token ids from added_tokens.json and the ids of each
text piece from golden-encodings.jsonl (ids a reference tokenizer produced), so golden
prompts do not depend on any tokenizer implementation. "user\\n<image 1>" is one text
piece; its encoding is that of "user\\n" followed by that of "<image 1>" because the
pre-tokenizer splits after the newline.
"""

import json

SYSTEM = "system\nYou are a helpful assistant.\n"


class PromptBuilder:
    def __init__(self, added_tokens_path, golden_encodings_path):
        with open(added_tokens_path) as f:
            self.added = json.load(f)
        self.encodings = {}
        with open(golden_encodings_path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    self.encodings[row["text"]] = row["ids"]

    def token(self, name):
        if name not in self.added:
            raise KeyError(f"added token {name!r} not in added_tokens.json")
        return self.added[name]

    def text(self, s):
        if s not in self.encodings:
            raise KeyError(f"no golden encoding for {s!r}")
        return list(self.encodings[s])

    def build(self, query, n_image_tokens):
        """Prompt ids for a query (a text with a golden encoding) and N image slots."""
        tok, text = self.token, self.text
        return (
            [tok("<|im_start|>")] + text(SYSTEM) + [tok("<|im_end|>")] + text("\n")
            + [tok("<|im_start|>")] + text("user\n") + text("<image 1>")
            + [tok("<img>")] + [tok("<IMG_CONTEXT>")] * n_image_tokens + [tok("</img>")]
            + text(query) + [tok("<|im_end|>")] + text("\n")
            + [tok("<|im_start|>")] + text("assistant\n")
        )
