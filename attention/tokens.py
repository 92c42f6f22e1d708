"""The token ids every sequence model and task shares: a leaf, so Seq2Seq (a model) and attention.tasks (the
data) both read them from here and neither imports the other.
"""

__all__ = ("PAD", "BOS", "EOS", "FIRST_TOKEN")

PAD, BOS, EOS = 0, 1, 2  # padding (cross_entropy's ignore_index), the decoder's first input, end of a target
FIRST_TOKEN = 3          # content tokens are FIRST_TOKEN .. vocab_size - 1
