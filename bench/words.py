"""words.py OUT [N] — a text corpus of N random words (default 60000) from a
small vocabulary, seeded (the same file every time): the training data of
the bench scripts (sim_calibrate.sh, tp.sh)."""
import random
import sys

r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 60000
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(n)))
