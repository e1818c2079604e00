"""gbtrain.metric.text_scores, checked against the benchmarks' own scorers on thousands of seeded random pairs.

The references below restate each official script's conventions in a few lines, independent of gbtrain's code:
- SQuAD v1.1, evaluate-v1.1.py (normalize_answer, f1_score): lowercase, delete the characters of
  string.punctuation, replace the articles matched by \\b(a|an|the)\\b with a space, split on whitespace, count the
  shared tokens as multisets (Counter &); no shared token -> 0, two empty texts included.
- CMRC 2018, cmrc2018_evaluate.py (mixed_segmentation with rm_punc=True, calc_f1_score): lowercase and strip; skip
  the characters of its sp_char list (CMRC_SKIPPED); each character in U+4E00-U+9FA5 is a token; the runs between
  them go through nltk.word_tokenize, here str.split (the generated runs hold only letters, digits and spaces, where
  the two agree); F1 over the longest common contiguous run of tokens (find_lcs); no common token -> 0.
- DocVQA / InfographicVQA's evaluation script (copied in Qwen-VL's eval_mm/infographicsvqa_eval.py and as lmms-eval's
  `anls` metric): Levenshtein of " ".join(s.strip().lower().split()) of both, over the longer length of the RAW
  strings (len(s.upper())); 1 - the least over the answers; zeroed only when `< threshold`.

Each deliberate difference is a named rule below, and each test asserts that the scores differ by exactly that rule.
"""

import random
import re
import string
import time
import unicodedata
from collections import Counter

import pytest

from gbtrain.metric.text_scores import anls, f1_tokens, normalize_text, token_f1

PAIRS = 3000

# --- the peers' conventions --------------------------------------------------------------------------------------

# CMRC 2018's sp_char: skipped, not split on, so "x+1" reads "x1" there. Its "……" entry is two characters and so
# never equals the one character it is compared with.
CMRC_SKIPPED = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")


def squad_tokens(text: str) -> list[str]:
    kept = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return re.sub(r"\b(a|an|the)\b", " ", kept).split()


def squad_f1(prediction: str, ground_truth: str) -> float:
    pred, gold = squad_tokens(prediction), squad_tokens(ground_truth)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(pred), 1.0 * same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def cmrc_segments(text: str) -> list[str]:
    segments, run = [], ""
    for ch in text.lower().strip():
        if ch in CMRC_SKIPPED:
            continue
        if "\u4e00" <= ch <= "\u9fa5":
            segments += [*run.split(), ch]
            run = ""
        else:
            run += ch
    return segments + run.split()


def longest_common_run(a: list[str], b: list[str]) -> int:
    best, above = 0, [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(above[j] + 1 if x == y else 0)
        best, above = max(best, *row), row
    return best


def multiset_overlap(a: list[str], b: list[str]) -> int:
    return sum((Counter(a) & Counter(b)).values())


def cmrc_f1(answer: str, prediction: str, overlap=longest_common_run) -> float:
    ans, pred = cmrc_segments(answer), cmrc_segments(prediction)
    same = overlap(ans, pred)
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(pred), 1.0 * same / len(ans)
    return (2 * precision * recall) / (precision + recall)


def levenshtein(a: str, b: str) -> int:
    above = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            row.append(min(above[j] + 1, row[j - 1] + 1, above[j - 1] + (x != y)))
        above = row
    return above[-1]


def docvqa_anls(prediction: str, answers: list[str], threshold: float = 0.5) -> float:
    values = []
    for answer in answers:
        gt, det = (" ".join(s.strip().lower().split()) for s in (answer, prediction))
        length = max(len(answer.upper()), len(prediction.upper()))
        values.append(0.0 if length == 0 else levenshtein(gt, det) / length)
    score = 1 - min(values)
    return 0 if score < threshold else score


# --- gbtrain's named differences ---------------------------------------------------------------------------------

# Rule "symbols are tokens": the ASCII characters SQuAD deletes as punctuation that Unicode files as symbols (S*).
# gbtrain deletes punctuation (P*) and counts each symbol as a token, so that "x+1=3" is x + 1 = 3.
ASCII_SYMBOLS = "$+<=>^`|~"


def squad_tokens_with_symbols(text: str) -> list[str]:
    spaced = re.sub(f"([{re.escape(ASCII_SYMBOLS)}])", r" \1 ", text.lower())
    kept = "".join(ch for ch in spaced if ch not in string.punctuation or ch in ASCII_SYMBOLS)
    return re.sub(r"\b(a|an|the)\b", " ", kept).split()


def squad_f1_with_symbols(prediction: str, ground_truth: str) -> float:
    pred, gold = squad_tokens_with_symbols(prediction), squad_tokens_with_symbols(ground_truth)
    same = multiset_overlap(pred, gold)
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(pred), 1.0 * same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def nfkc_collapsed(s: str) -> str:
    """Rule "the CER gate's text": NFKC, lowercase, whitespace collapsed, before the script's own steps (which then
    change nothing, and make its raw-length denominator the normalised length)."""
    return " ".join(unicodedata.normalize("NFKC", s).lower().split())


# --- random pairs ------------------------------------------------------------------------------------------------

CHINESE = [chr(c) for c in range(0x4E00, 0x9FA6) if chr(c) != "答"]  # 答 starts an answer prefix (答：) for gbtrain
CONSONANTS = "bcdfghjklmnpqrstvwxzBCDFGHJKLMNPQRSTVWXZ"  # words without vowels: no article, no "answer:" prefix
CMRC_PUNCTUATION = sorted(c for c in CMRC_SKIPPED  # what both skip: Unicode punctuation after NFKC
                          if all(unicodedata.category(x).startswith("P") for x in unicodedata.normalize("NFKC", c)))
ASCII_PUNCTUATION = [c for c in string.punctuation if c not in ASCII_SYMBOLS]
SEPARATORS = ["", "", " ", " ", "  ", "\t"]


def chinese_ascii_piece(rng: random.Random) -> str:
    kind = rng.choices(["han", "word", "digits", "punct"], weights=[6, 2, 2, 1])[0]
    if kind == "han":
        return rng.choice(CHINESE[:40])  # a small pool, so that pairs share characters
    if kind == "word":
        return "".join(rng.choices(CONSONANTS[:6] + CONSONANTS[20:23], k=rng.randint(1, 3)))
    if kind == "digits":
        return "".join(rng.choices("0123456789", k=rng.randint(1, 2)))
    return rng.choice(CMRC_PUNCTUATION)


def ascii_piece(rng: random.Random) -> str:
    kind = rng.choices(["word", "article", "digits", "punct"], weights=[5, 1, 2, 2])[0]
    if kind == "word":
        return "".join(rng.choices("abcdeiosnABE", k=rng.randint(1, 3)))
    if kind == "article":
        return rng.choice(["a", "an", "the", "The", "A"])
    if kind == "digits":
        return "".join(rng.choices("0123456789", k=rng.randint(1, 2)))
    return "".join(rng.choices(ASCII_PUNCTUATION, k=rng.randint(1, 2)))


def ascii_symbol_piece(rng: random.Random) -> str:
    return rng.choice(ASCII_SYMBOLS) if rng.random() < 0.3 else ascii_piece(rng)


def random_pairs(piece, seed: int, n: int = PAIRS) -> list[tuple[str, str]]:
    """(prediction, reference): a reference of random pieces and a prediction made from it by dropping, replacing
    and inserting pieces, each joined with random spacing (none, spaces or a tab)."""
    rng = random.Random(seed)

    def join(pieces):
        return "".join(p + rng.choice(SEPARATORS) for p in pieces)

    pairs = []
    while len(pairs) < n:
        ref = [piece(rng) for _ in range(rng.randint(0, 8))]
        pred = []
        for p in ref:
            action = rng.choices(["keep", "drop", "replace", "insert"], weights=[6, 1, 1, 1])[0]
            pred += {"keep": [p], "drop": [], "replace": [piece(rng)], "insert": [p, piece(rng)]}[action]
        pairs.append((join(pred), join(ref)))
    return pairs


# --- token F1 against SQuAD and CMRC 2018 ------------------------------------------------------------------------


def test_the_named_ascii_symbols_are_exactly_what_squad_deletes_beyond_unicode_punctuation():
    assert {c for c in string.punctuation if not unicodedata.category(c).startswith("P")} == set(ASCII_SYMBOLS)


def test_ascii_pairs_agree_with_squad_but_for_two_empty_texts():
    """Rule "two empty texts score 1" (SQuAD v2's rule; v1.1 gives 0): the only difference on ASCII text without
    symbols."""
    both_empty = partial = 0
    for pred, ref in random_pairs(ascii_piece, seed=11):
        ours, theirs = token_f1(pred, ref), squad_f1(pred, ref)
        if not squad_tokens(pred) and not squad_tokens(ref):
            assert (ours, theirs) == (1.0, 0), (pred, ref)
            both_empty += 1
        else:
            assert ours == theirs, (pred, ref)
            partial += 0 < ours < 1
    assert both_empty > 10 and partial > PAIRS // 3


def test_ascii_symbols_are_tokens_where_squad_deletes_them():
    """Rule "symbols are tokens": with it, SQuAD's score is gbtrain's; without it, the two differ on some pairs."""
    differ = 0
    for pred, ref in random_pairs(ascii_symbol_piece, seed=12):
        if any(s.lstrip().startswith("=") for s in (pred, ref)):
            continue  # a leading "=" is an answer prefix to normalize_answer ("= 5" is the answer 5)
        ours = token_f1(pred, ref)
        if not squad_tokens_with_symbols(pred) and not squad_tokens_with_symbols(ref):
            assert ours == 1.0
            continue
        assert ours == squad_f1_with_symbols(pred, ref), (pred, ref)
        differ += ours != squad_f1(pred, ref)
    assert differ > PAIRS // 4


def test_chinese_and_ascii_pairs_agree_with_cmrc_but_for_the_overlap_count():
    """CMRC 2018's tokens exactly. Rule "multiset overlap": gbtrain counts every shared token (SQuAD's Counter), CMRC
    only the longest common contiguous run, so CMRC's score is never higher and is lower where the shared tokens
    are not one run. Rule "two empty texts score 1", as above."""
    lower = both_empty = 0
    for pred, ref in random_pairs(chinese_ascii_piece, seed=13):
        ours, official = token_f1(pred, ref), cmrc_f1(ref, pred)
        assert f1_tokens(pred) == cmrc_segments(pred), pred
        if not cmrc_segments(pred) and not cmrc_segments(ref):
            assert (ours, official) == (1.0, 0)
            both_empty += 1
            continue
        assert ours == cmrc_f1(ref, pred, overlap=multiset_overlap), (pred, ref)
        assert official <= ours
        lower += official < ours
    assert both_empty > 0 and lower > PAIRS // 10


def test_spacing_does_not_change_chinese_tokens():
    """The bug this module fixed: one space switched a side to whitespace words (30 of 39 mixed pairs scored 0)."""
    rng = random.Random(14)
    for pred, ref in random_pairs(chinese_ascii_piece, seed=14, n=500):
        spaced = "".join(ch + rng.choice(["", " "]) if "\u4e00" <= ch <= "\u9fa5" else ch for ch in pred)
        assert token_f1(spaced, ref) == token_f1(pred, ref)


@pytest.mark.parametrize(("prediction", "reference", "expected"), [
    ("北京 Beijing", "北京", 0.8),  # [北, 京, beijing] vs [北, 京]: P 2/3, R 1: 0.8, CMRC's 0.8 too (was 0.0)
    ("5 个苹果", "5个苹果", 1.0),  # both [5, 个, 苹, 果] (was 1/3)
    ("北京市海淀区", "北京市海定区", 5 / 6),  # 5 of 6 shared; CMRC's longest run 北京市 gives 0.5
    ("x+1=3", "x + 1 = 3", 1.0),  # [x, +, 1, =, 3] both
    ("x+1=3", "x+2=3", 0.8),  # 4 of 5 shared
    ("答案是北京。", "北京", 1.0),  # answer prefix and punctuation removed
    ("the北京", "北京", 1.0),  # the article dropped though no word boundary separates it
    ("東京タワー", "東京", 4 / 7),  # kana per character: [東, 京, タ, ワ, ー] vs [東, 京]
    ("서울 특별시", "서울특별시", 1.0),  # Hangul per syllable
    ("２５个", "25个", 1.0),  # NFKC
    ("12", "1 2", 0.0),  # a digit run is one token
    ("3.14", "314", 1.0),  # punctuation deleted as SQuAD deletes it: the number rule tells these apart
    ("Paris!", "paris", 1.0),
    ("the cat sat on the mat", "cat on mat", 6 / 7),  # [cat, sat, on, mat] vs [cat, on, mat]: P 3/4, R 1
    ("cat cat", "cat", 2 / 3),  # repeats count once each: common min(2, 1) = 1
    ("北京是首都", "北京", 4 / 7),
    ("上海", "北京", 0.0),
    ("dog", "cat", 0.0),
    ("", "", 1.0),
    ("the", "a", 1.0),  # both empty after normalisation
    ("", "cat", 0.0),
    ("cat", "", 0.0),
])
def test_token_f1_by_hand(prediction, reference, expected):
    assert token_f1(prediction, reference) == pytest.approx(expected)
    assert token_f1(reference, prediction) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "tokens"), [
    ("x+1=3", ["x", "+", "1", "=", "3"]),
    ("北京 Beijing", ["北", "京", "beijing"]),
    ("12个苹果", ["12", "个", "苹", "果"]),
    ("√2×3°", ["√", "2", "×", "3", "°"]),
    ("the北京 a cat", ["北", "京", "cat"]),
    ("Final answer: Ｘ＝５", ["x", "=", "5"]),
])
def test_f1_tokens(text, tokens):
    assert f1_tokens(text) == tokens


def test_token_f1_is_linear_on_a_runaway_answer():
    text = ("北京 Beijing x+1=3，" * 70_000)[:1_000_000]  # a whole reply at the parser's size limit
    start = time.perf_counter()
    assert token_f1(text, "北京") > 0
    assert time.perf_counter() - start < 5.0


# --- ANLS against the DocVQA script ------------------------------------------------------------------------------


def anls_pairs(seed: int, noisy: bool) -> list[tuple[str, list[str]]]:
    """(prediction, references): short texts and edits of them, many at a similarity of exactly 0.5. Noisy texts
    add what the CER gate's normalisation folds: case, fullwidth forms, ideographic spaces, tabs, runs of spaces."""
    rng = random.Random(seed)

    def edit(s):
        chars = list(s)
        for _ in range(rng.randint(0, max(1, len(chars)))):
            i = rng.randint(0, len(chars))
            op = rng.choice(["sub", "del", "ins"])
            if op == "ins" or not chars:
                chars.insert(i, rng.choice("abxy "))
            elif i < len(chars):
                chars[i:i + 1] = [] if op == "del" else [rng.choice("abxy")]
        return "".join(chars)

    def noise(s):
        s = "".join(rng.choice([c, c.upper(), chr(ord(c) + 0xFEE0) if c.isalnum() else "\u3000"]) for c in s)
        return rng.choice(["", " ", "\t"]) + s.replace(" ", rng.choice([" ", "  ", "\u3000"])) + rng.choice(["", " "])

    pairs = []
    while len(pairs) < PAIRS:
        base = "".join(rng.choices("abxy1 ", k=rng.randint(0, 10)))
        refs = [edit(base) for _ in range(rng.randint(1, 3))]
        pred = edit(base)
        if noisy:
            pairs.append((noise(pred), [noise(r) for r in refs]))
        else:
            pairs.append((" ".join(pred.split()), [" ".join(r.split()) for r in refs]))
    return pairs


def test_anls_agrees_with_the_docvqa_script_on_normalised_text():
    """Exact agreement, the kept similarity of exactly 0.5 included."""
    half = 0
    for pred, refs in anls_pairs(seed=21, noisy=False):
        theirs = docvqa_anls(pred, refs)
        assert anls(pred, refs) == theirs, (pred, refs)
        half += theirs == 0.5
    assert half > 50


def test_anls_differs_from_the_docvqa_script_only_by_the_cer_gates_normalisation():
    """Rule "the CER gate's text": the script on nfkc_collapsed texts is gbtrain's ANLS; on the raw texts it differs
    (fullwidth "２５" is not "25" there, and its denominator counts the raw length, spaces and all)."""
    differ = 0
    for pred, refs in anls_pairs(seed=22, noisy=True):
        ours = anls(pred, refs)
        assert ours == docvqa_anls(nfkc_collapsed(pred), [nfkc_collapsed(r) for r in refs]), (pred, refs)
        differ += ours != docvqa_anls(pred, refs)
    assert differ > PAIRS // 4


@pytest.mark.parametrize(("prediction", "reference", "expected"), [
    ("２５", "25", 1.0),  # NFKC, as the CER gate (the script: 0)
    ("ＨＥＬＬＯ\u3000World", "hello world", 1.0),
    ("  Hello   World ", "hello world", 1.0),
    ("HELLO\tworld", "hello world", 1.0),
    ("abcd", "abxy", 0.5),  # 2 edits over 4: similarity exactly 0.5, kept as the script keeps it (was 0)
    ("abcde", "abxyz", 0.0),  # 3 edits over 5: 0.4 < 0.5
    ("abcd", "abcx", 0.75),
    ("kitten", "sitting", 4 / 7),  # 3 edits over 7
    ("kitten", ["sitting", "kitchen"], 5 / 7),  # the best reference: kitchen is 2 edits over 7
    ("kitten", ["zzzzzz", "kitten"], 1.0),
    ("ab  ", "ax", 0.5),  # collapsed "ab" vs "ax"; the script divides by the raw length 4: 0.75
    ("", "", 1.0),
    ("  ", "", 1.0),
    ("", "abc", 0.0),
    ("abc", "", 0.0),
])
def test_anls_by_hand(prediction, reference, expected):
    assert anls(prediction, reference) == pytest.approx(expected)


def test_anls_threshold_is_the_least_similarity_kept():
    assert anls("abcd", "abxy", threshold=0.5) == 0.5
    assert anls("abcd", "abxy", threshold=0.6) == 0.0
    assert anls("abcde", "abxyz", threshold=0.4) == pytest.approx(0.4)


def test_anls_needs_a_reference():
    with pytest.raises(ValueError):
        anls("kitten", [])


def test_anls_long_inputs_are_capped_and_fast():
    a, b = "ab" * 50_000, "ba" * 50_000  # 100,000 characters each: 10^10 cells, over the 25,000,000 cap
    start = time.perf_counter()
    score = anls(a, b)
    assert time.perf_counter() - start < 1.0
    # scored on the first 5,000 characters: "abab...ab" vs "baba...ba" is 2 edits (drop the first a, append one)
    assert score == pytest.approx(1 - 2 / 5000)
    rng = random.Random(1)
    c, d = ("".join(rng.choice("abcdefghij") for _ in range(100_000)) for _ in range(2))
    start = time.perf_counter()
    assert anls(c, d) == 0.0  # unrelated random texts: similarity far below 0.5
    assert time.perf_counter() - start < 1.0


def test_normalize_text():
    assert normalize_text(" Ａ\u3000b\tC\n") == "abc"  # the CER gate's
    assert normalize_text(" Ａ\u3000b\tC\n", " ") == "a b c"  # ANLS's
