"""The per-character tokenizer of parsers.md section 7.2.

Every character of the outputs is one token, every marker string of a format is one special added
token, so parsers that look markers up in the vocabulary find them and deltas can be cut per
character. No model hub is involved.
"""
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

UNK = "\ufffd"


def build(texts, markers):
    """A tokenizer over every character of `texts` plus `markers` as single special tokens."""
    chars = sorted({c for t in texts for c in t} | {UNK, " ", "\n"})
    vocab = {c: i for i, c in enumerate(chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    ordered = sorted(set(markers), key=lambda m: (-len(m), m))
    core.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in ordered])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=UNK)


def token_strings(tokenizer, text):
    """The text split into its tokens (characters and whole markers), in order."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    if "".join(pieces) != text:
        raise ValueError(f"per-character tokenizer does not round-trip {text!r}")
    return ids, pieces
