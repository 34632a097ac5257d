#!/usr/bin/python3
"""oracle_text.py — writes data.txt (~6 KB of deterministic English-like text
from a fixed LCG over a word list) in the current folder: the training text
of the PyTorch oracle tests (test_torch_oracle.sh, test_llama_oracle.sh)."""
words = ("the of and to in is was that for it with as on be at by this had not are but from "
         "or have an they which one you were her all she there would their we him been has "
         "when who will more no if out so said what up its about into than them can only "
         "other new some could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too little "
         "state good very make world still own see men work long get here between both life "
         "being under never day same another know while last might us great old year off "
         "come since against go came right used take three pipeline stage gradient").split()
state = 12345
def rnd(n):
    global state
    state = (state * 1103515245 + 12345) % 2147483648
    return (state >> 16) % n
out, line = [], []
while sum(len(s) + 1 for s in out) < 6000:
    n = 4 + rnd(10)
    sent = " ".join(words[rnd(len(words))] for _ in range(n))
    sent = sent[0].upper() + sent[1:] + (". " if rnd(5) else ", ")
    out.append(sent + ("\n" if rnd(4) == 0 else ""))
with open("data.txt", "w") as f:
    f.write("".join(out))
