"""Built-in question banks for the synthetic exam pages.

Each generator returns a ``Question``: a printed stem, optional chart, and one or more parts, each
with the reference answer, what the student wrote, and whether that is right. Numbers are drawn at
random and facts are sampled from lists, so pages do not repeat; wrong answers are plausible
(off-by-one numbers, a neighbouring option, a misspelling, a look-alike character).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial

from gbtrain.schema import NO_REFERENCE

FILL, CHOICE, TF, SOLVE = "Fill-in-the-blank", "Multiple-choice", "True-False", "Problem-Solving"
QUESTION_TYPES = (FILL, CHOICE, TF, SOLVE)


@dataclass
class Chart:
    """A simple figure drawn under the stem: bars with values, or a labelled triangle."""

    kind: str  # "bars" | "triangle" | "numberline"
    labels: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    title: str = ""


# Points (docs/data.md): each question type's full score per answer and its rubric, as a teacher's marking scheme
# states them. Objective answers earn all or nothing; problem-solving work earns part of its points when
# the working is right and the result is not (each bank's Part.wrong_credit says how many its wrong answer earns).
RUBRICS: dict[str, tuple[int, str | None]] = {  # an objective answer needs no rubric text (every one is in the prompt)
    FILL: (2, None),
    CHOICE: (3, None),
    TF: (2, None),
    SOLVE: (6, "3 working, 3 result; a misspelling -2"),
}


@dataclass
class Part:
    prompt: str  # printed before the answer slot ("" when the stem is the prompt)
    std: str  # reference answer as annotated (may be NO_REFERENCE)
    right_answer: str  # what a correct student writes (handwriting)
    wrong_answer: str  # a plausible mistake
    qtype: str
    lines: int = 1  # handwriting lines the answer area takes (problem-solving work takes more)
    wrong_credit: int = 0  # points the wrong answer earns under its type's rubric (RUBRICS), e.g. the working right


@dataclass
class Question:
    stem: str
    parts: list[Part]
    content_format: str = "Text-only"
    chart: Chart | None = None
    options: list[str] = field(default_factory=list)  # printed choices, e.g. ["A. 3", "B. 4", ...]


def _near_number(rng: random.Random, n: int) -> int:
    """A plausible wrong number: off by one, off by ten, or two digits swapped."""
    choices = [n + 1, n - 1, n + 10, n - 10]
    s = str(abs(n))
    if len(s) >= 2 and s[-1] != s[-2]:
        choices.append(int(s[:-2] + s[-1] + s[-2]) * (1 if n >= 0 else -1))
    wrong = rng.choice([c for c in choices if c != n])
    return wrong


def _misspell(rng: random.Random, word: str) -> str:
    """Swap two adjacent letters, drop one, or double one."""
    if len(word) < 3:
        return word + word[-1]
    i = rng.randrange(1, len(word) - 1)
    op = rng.randrange(3)
    if op == 0 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if op == 1:
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]


def _choice_question(rng: random.Random, stem: str, correct: str, distractors: list[str],
                     zh: bool) -> Question:
    opts = [correct, *rng.sample(distractors, 3)]
    rng.shuffle(opts)
    letters = "ABCD"
    answer = letters[opts.index(correct)]
    wrong = rng.choice([c for c in letters if c != answer])
    options = [f"{letters[i]}. {o}" for i, o in enumerate(opts)]
    return Question(stem=stem + ("（　　）" if zh else " (    )"),
                    parts=[Part("", answer, answer, wrong, CHOICE)], options=options)


def _tf_question(rng: random.Random, statement: str, truth: bool, zh: bool) -> Question:
    yes, no = ("√", "×") if zh else ("T", "F")
    ans = yes if truth else no
    return Question(stem=statement + ("（　　）" if zh else " (    )"),
                    parts=[Part("", ans, ans, no if truth else yes, TF)])


# --------------------------------------------------------------------------------------- Mathematics
def _math_fill(rng: random.Random, stage: str) -> Question:
    parts = []
    for _ in range(rng.choice([1, 2, 2, 3])):
        if stage == "Elementary":
            a, b = rng.randint(12, 99), rng.randint(2, 99)
            op = rng.choice("+-×÷")
            if op == "+":
                n = a + b
            elif op == "-":
                a, b = max(a, b), min(a, b)
                n = a - b
            elif op == "×":
                b = rng.randint(2, 9)
                n = a * b
            else:
                b = rng.randint(2, 9)
                a = b * rng.randint(3, 30)
                n = a // b
            prompt = f"{a} {op} {b} ="
        elif stage == "Junior_High":
            x, a = rng.randint(-9, 12), rng.randint(2, 9)
            b = rng.randint(-20, 20)
            prompt = f"若 {a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}，则 x ="
            n = x
        else:
            base, k = rng.choice([2, 3, 5]), rng.randint(2, 6)
            prompt = f"log{_sub(base)}{base ** k} ="
            n = k
        w = _near_number(rng, n)
        parts.append(Part(prompt, str(n), str(n), str(w), FILL))
    stem = "直接写出得数。" if stage == "Elementary" else "填空。"
    return Question(stem=stem, parts=parts)


def _sub(n: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(d)] for d in str(n))


def _math_choice(rng: random.Random, stage: str) -> Question:
    kind = rng.randrange(3)
    if kind == 0:
        vals = rng.sample(range(101, 999), 4)
        decimals = [f"{v / 1000:.3f}".rstrip("0") for v in vals]
        pick = max if rng.random() < 0.5 else min
        best = pick(decimals, key=float)
        stem = f"下列各数中，{'最大' if pick is max else '最小'}的数是"
        return _choice_question(rng, stem, best, [d for d in decimals if d != best], zh=True)
    if kind == 1:
        k = rng.choice([3, 4, 6, 7, 9])
        multiple = k * rng.randint(3, 15)
        others = rng.sample([n for n in range(10, 120) if n % k], 3)
        return _choice_question(rng, f"下列各数中，是 {k} 的倍数的是", str(multiple), [str(o) for o in others], zh=True)
    r, pi = rng.randint(2, 9), 3.14
    area = f"{pi * r * r:g}"
    others = [f"{pi * 2 * r:g}", f"{pi * r:g}", f"{pi * (r + 1) ** 2:g}"]
    return _choice_question(rng, f"半径为 {r} cm 的圆，面积是多少平方厘米？（π取3.14）", area, others, zh=True)


def _math_tf(rng: random.Random, stage: str) -> Question:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    truth = rng.random() < 0.5
    shown = a * b if truth else a * b + rng.choice([-2, -1, 1, 2])
    return _tf_question(rng, f"判断：{a} × {b} = {shown}", truth, zh=True)


def _math_solve(rng: random.Random, stage: str) -> Question:
    items, people = rng.randint(3, 9) * rng.randint(3, 9), 0
    people = rng.choice([d for d in range(2, 10) if items % d == 0] or [1])
    each = items // people
    thing = rng.choice(["苹果", "铅笔", "本子", "气球", "橘子"])
    unit = "个" if thing in ("苹果", "气球", "橘子") else ("支" if thing == "铅笔" else "本")
    stem = f"应用题：学校买来 {items} {unit}{thing}，平均分给 {people} 个班，每个班分到多少{unit}？"
    wrong_each = _near_number(rng, each)
    right = f"{items}÷{people}={each}({unit}) 答：每个班分到{each}{unit}。"
    wrong = f"{items}÷{people}={wrong_each}({unit}) 答：每个班分到{wrong_each}{unit}。"
    return Question(stem=stem, parts=[Part("", f"{each}{unit}", right, wrong, SOLVE, lines=2, wrong_credit=3)])


def _math_chart(rng: random.Random, stage: str) -> Question:
    if rng.random() < 0.5:
        days = ["一", "二", "三", "四", "五"]
        values = [rng.randint(2, 12) * 5 for _ in days]
        parts = []
        for d in rng.sample(range(5), 2):
            v = values[d]
            parts.append(Part(f"星期{days[d]}卖出", str(v), str(v), str(v + rng.choice([-5, 5])), FILL))
        chart = Chart("bars", [f"周{d}" for d in days], values, "图书销售统计（本）")
        return Question(stem="看统计图填空。", parts=parts, content_format="Chart-based", chart=chart)
    a, b = rng.randint(30, 80), rng.randint(30, 80)
    c = 180 - a - b
    chart = Chart("triangle", ["A", "B", "C"], [a, b, c])
    return Question(stem=f"如图，三角形中 ∠A = {a}°，∠B = {b}°，求 ∠C。", content_format="Chart-based",
                    chart=chart, parts=[Part("∠C =", f"{c}°", f"{c}°", f"{_near_number(rng, c)}°", FILL)])


# --------------------------------------------------------------------------------------- Chinese
_PINYIN_WORDS = [
    ("gāo xìng", "高兴", "高心"), ("péng you", "朋友", "明友"), ("xué xiào", "学校", "学较"),
    ("měi lì", "美丽", "美丰"), ("tiān kōng", "天空", "天穴"), ("huā yuán", "花园", "花圆"),
    ("kuài lè", "快乐", "块乐"), ("qīng chu", "清楚", "青楚"), ("jiān chí", "坚持", "坚特"),
    ("lǐ wù", "礼物", "礼勿"), ("wēn nuǎn", "温暖", "温暧"), ("shēng yīn", "声音", "声意"),
    ("fēng jǐng", "风景", "风影"), ("gù xiang", "故乡", "古乡"), ("jiāo ào", "骄傲", "娇傲"),
]
_IDIOMS = [("画蛇添", "足", "脚"), ("守株待", "兔", "免"), ("亡羊补", "牢", "劳"), ("井底之", "蛙", "娃"),
           ("对牛弹", "琴", "情"), ("自相矛", "盾", "质"), ("掩耳盗", "铃", "玲"), ("刻舟求", "剑", "箭")]
_POETS = [("春眠不觉晓", "孟浩然", "李白"), ("床前明月光", "李白", "杜甫"), ("锄禾日当午", "李绅", "白居易"),
          ("白日依山尽", "王之涣", "王维"), ("离离原上草", "白居易", "孟浩然"), ("两个黄鹂鸣翠柳", "杜甫", "李绅")]
_SENTENCES = ["因为下雨了，所以我们没有去公园。", "因为他很努力，所以考得很好。",
              "因为天气很冷，所以妈妈给我加了衣服。"]


def _chinese_fill(rng: random.Random, stage: str) -> Question:
    if rng.random() < 0.6:
        picks = rng.sample(_PINYIN_WORDS, rng.choice([1, 2, 3]))
        parts = [Part(p, w, w, bad, FILL) for p, w, bad in picks]
        return Question(stem="看拼音，写词语。", parts=parts)
    picks = rng.sample(_IDIOMS, rng.choice([1, 2]))
    return Question(stem="补全成语。", parts=[Part(h, a, a, bad, FILL) for h, a, bad in picks])


def _chinese_choice(rng: random.Random, stage: str) -> Question:
    _, word, bad = rng.choice(_PINYIN_WORDS)
    others = [b for _, _, b in rng.sample(_PINYIN_WORDS, 4) if b != bad][:3]
    return _choice_question(rng, "下列词语中，书写正确的一项是", word, [bad, *others], zh=True)


def _chinese_tf(rng: random.Random, stage: str) -> Question:
    line, poet, other = rng.choice(_POETS)
    truth = rng.random() < 0.5
    return _tf_question(rng, f"“{line}”的作者是{poet if truth else other}。", truth, zh=True)


def _chinese_solve(rng: random.Random, stage: str) -> Question:
    sentence = rng.choice(_SENTENCES)
    wrong = sentence.replace("所以", "但是", 1)
    std = NO_REFERENCE if rng.random() < 0.5 else sentence
    # the sentence is written, the asked-for connective is not: the working's points only
    return Question(stem="用“因为……所以……”写一句话。",
                    parts=[Part("", std, sentence, wrong, SOLVE, lines=2, wrong_credit=3)])


# --------------------------------------------------------------------------------------- English
_VERBS = [("go", "goes"), ("watch", "watches"), ("play", "plays"), ("study", "studies"), ("have", "has"),
          ("swim", "swims"), ("read", "reads"), ("fly", "flies"), ("teach", "teaches"), ("do", "does")]
_NAMES = ["Tom", "Lucy", "Amy", "Mike", "Lily", "John", "Sarah", "Peter"]
_WORDS = [("book", "a thing you read"), ("apple", "a red or green fruit"), ("teacher", "a person who teaches"),
          ("window", "you look out of it"), ("winter", "the coldest season"), ("library", "a place with books"),
          ("orange", "a fruit and a colour"), ("pencil", "you write with it"), ("morning", "before noon"),
          ("bridge", "it crosses a river"), ("kitchen", "where you cook"), ("doctor", "works in a hospital")]
_QWORDS = [("How old", "She is twelve."), ("Where", "He is in the park."), ("What colour", "It is blue."),
           ("When", "At seven o'clock."), ("Who", "She is my sister."), ("How many", "There are five.")]
_TRANSLATIONS = [("我喜欢读书。", "I like reading books."),
                 ("他每天骑车上学。", "He goes to school by bike every day."),
                 ("今天天气很好。", "The weather is fine today."), ("我们是好朋友。", "We are good friends.")]


def _english_fill(rng: random.Random, stage: str) -> Question:
    parts = []
    if rng.random() < 0.5:
        for base, third in rng.sample(_VERBS, rng.choice([1, 2, 3])):
            name = rng.choice(_NAMES)
            wrong = rng.choice([base, _misspell(rng, third)])
            parts.append(Part(f"{name} ____ ({base}) every day.", third, third, wrong, FILL))
        return Question(stem="Fill in the blanks with the right form of the verb.", parts=parts)
    for word, hint in rng.sample(_WORDS, rng.choice([1, 2, 3])):
        shown = word[0] + "_" * (len(word) - 2) + word[-1]
        parts.append(Part(f"{shown} ({hint})", word, word, _misspell(rng, word), FILL))
    return Question(stem="Complete the words.", parts=parts)


def _english_choice(rng: random.Random, stage: str) -> Question:
    q, reply = rng.choice(_QWORDS)
    others = [w for w, _ in _QWORDS if w != q]
    return _choice_question(rng, f"— ＿＿＿ ? — {reply}", q, others, zh=False)


def _english_tf(rng: random.Random, stage: str) -> Question:
    name, fruit = rng.choice(_NAMES), rng.choice(["apples", "bananas", "pears", "grapes"])
    likes = rng.random() < 0.5
    story = f"Read: {name} likes {fruit}. Judge: {name} {'likes' if likes else 'does not like'} {fruit}."
    return _tf_question(rng, story, likes, zh=False)


def _english_solve(rng: random.Random, stage: str) -> Question:
    zh, en = rng.choice(_TRANSLATIONS)
    words = en.split()
    i = rng.randrange(len(words))
    wrong = " ".join([*words[:i], _misspell(rng, words[i].strip(".")), *words[i + 1:]])
    std = NO_REFERENCE if rng.random() < 0.25 else en
    return Question(stem=f"Translate into English: {zh}",
                    parts=[Part("", std, en, wrong, SOLVE, lines=2, wrong_credit=4)])  # one misspelt word


# ------------------------------------------------------------------------ fact tables (Science, Humanities)
def _table_fill(table: list, rng: random.Random, stage: str) -> Question:
    picks = rng.sample(table, rng.choice([1, 2]))
    return Question(stem="填空。", parts=[Part(p, a, a, bad, FILL) for p, a, bad in picks])


def _table_choice(table: list, rng: random.Random, stage: str) -> Question:
    stem, right, others = rng.choice(table)
    return _choice_question(rng, stem, right, others, zh=True)


def _table_tf(table: list, rng: random.Random, stage: str) -> Question:
    statement, truth = rng.choice(table)
    return _tf_question(rng, statement, truth, zh=True)


# --------------------------------------------------------------------------------------- Science
_SCI_FILL = [("标准大气压下，水在____℃时沸腾。", "100", "90"), ("植物通过____作用制造养料。", "光合", "呼吸"),
             ("地球绕太阳转一周约需____天。", "365", "360"), ("声音在____中不能传播。", "真空", "空气"),
             ("水由氢元素和____元素组成。", "氧", "氮"), ("光在真空中的速度约为____万千米每秒。", "30", "3")]
_SCI_FACTS = [("鲸是鱼类。", False), ("月球本身不发光。", True), ("铁在潮湿的空气中容易生锈。", True),
              ("所有金属都能被磁铁吸引。", False), ("蒸发只在水沸腾时发生。", False),
              ("种子发芽需要适宜的温度。", True)]
_SCI_CHOICE = [("下列属于哺乳动物的是", "海豚", ["鲨鱼", "青蛙", "麻雀", "金鱼"]),
               ("下列材料中导电性最好的是", "铜", ["木头", "塑料", "玻璃", "橡胶"]),
               ("太阳系中离太阳最近的行星是", "水星", ["金星", "地球", "火星", "木星"])]


def _science_solve(rng: random.Random, stage: str) -> Question:
    v, t = rng.choice([40, 50, 60, 80, 90]), rng.choice([2, 3, 1.5, 2.5])
    s = v * t
    s_txt = f"{s:g}"
    wrong_s = f"{s + v:g}"
    stem = f"一辆汽车以 {v} km/h 的速度行驶了 {t:g} h，它行驶的路程是多少？"
    return Question(stem=stem, parts=[Part("", f"{s_txt} km", f"s=vt={v}×{t:g}={s_txt}(km)",
                                           f"s=vt={v}×{t:g}={wrong_s}(km)", SOLVE, lines=2, wrong_credit=3)])


def _science_chart(rng: random.Random, stage: str) -> Question:
    months = ["3月", "4月", "5月", "6月"]
    values = [rng.randint(5, 30) for _ in months]
    i = rng.randrange(len(months))
    chart = Chart("bars", months, values, "月平均气温（℃）")
    return Question(stem="读图回答。", content_format="Chart-based", chart=chart,
                    parts=[Part(f"{months[i]}的平均气温是____℃", str(values[i]), str(values[i]),
                                str(values[i] + rng.choice([-2, -1, 1, 2])), FILL)])


# --------------------------------------------------------------------------------------- Humanities
_HUM_FILL = [("中华人民共和国成立于____年。", "1949", "1945"), ("我国的首都是____。", "北京", "南京"),
             ("世界上面积最大的大洋是____洋。", "太平", "大西"), ("长江是我国____的河流。", "最长", "最宽"),
             ("秦始皇统一六国是在公元前____年。", "221", "212"), ("我国陆地面积约为____万平方千米。", "960", "690")]
_HUM_FACTS = [("赤道是地球上最长的纬线。", True), ("黄河注入太平洋。", False), ("郑和下西洋发生在明朝。", True),
              ("地球自转方向是自东向西。", False), ("丝绸之路连接了中国与西方。", True)]
_HUM_CHOICE = [("我国最大的岛屿是", "台湾岛", ["海南岛", "崇明岛", "舟山岛", "南澳岛"]),
               ("造纸术的改进者是", "蔡伦", ["毕昇", "张衡", "祖冲之", "李时珍"]),
               ("世界上人口最多的大洲是", "亚洲", ["非洲", "欧洲", "南美洲", "大洋洲"])]


def _hum_solve(rng: random.Random, stage: str) -> Question:
    return Question(stem="简述保护环境的一条措施。", parts=[Part("", NO_REFERENCE, "节约用水，垃圾分类。",
                                                                "多用塑料袋。", SOLVE, lines=2)])


def _hum_chart(rng: random.Random, stage: str) -> Question:
    cities = rng.sample(["北京", "上海", "广州", "成都", "西安"], 4)
    values = [rng.randint(4, 20) * 100 for _ in cities]
    i = values.index(max(values))
    chart = Chart("bars", cities, values, "年降水量（毫米）")
    return Question(stem="读图：年降水量最多的城市是____。", content_format="Chart-based", chart=chart,
                    parts=[Part("", cities[i], cities[i], cities[(i + 1) % 4], FILL)])


BANKS = {
    "Mathematics": {FILL: [_math_fill, _math_fill, _math_chart], CHOICE: [_math_choice], TF: [_math_tf],
                    SOLVE: [_math_solve]},
    "Chinese": {FILL: [_chinese_fill], CHOICE: [_chinese_choice], TF: [_chinese_tf], SOLVE: [_chinese_solve]},
    "English": {FILL: [_english_fill], CHOICE: [_english_choice], TF: [_english_tf], SOLVE: [_english_solve]},
    "Science": {FILL: [partial(_table_fill, _SCI_FILL), partial(_table_fill, _SCI_FILL), _science_chart],
                CHOICE: [partial(_table_choice, _SCI_CHOICE)], TF: [partial(_table_tf, _SCI_FACTS)],
                SOLVE: [_science_solve]},
    "Humanities": {FILL: [partial(_table_fill, _HUM_FILL), partial(_table_fill, _HUM_FILL), _hum_chart],
                   CHOICE: [partial(_table_choice, _HUM_CHOICE)], TF: [partial(_table_tf, _HUM_FACTS)],
                   SOLVE: [_hum_solve]},
}

SECTION_TITLES = {
    True: {FILL: "填空题", CHOICE: "选择题", TF: "判断题", SOLVE: "解答题"},
    False: {FILL: "Fill in the blanks", CHOICE: "Choose the best answer", TF: "True or false",
            SOLVE: "Answer the questions"},
}
EXAM_TITLES = {
    "Mathematics": "数学", "Chinese": "语文", "English": "English", "Science": "科学", "Humanities": "历史与社会",
}
GRADES = {"Elementary": ["三年级", "四年级", "五年级", "六年级"], "Junior_High": ["七年级", "八年级", "九年级"],
          "Senior_High": ["高一", "高二", "高三"]}


def make_question(rng: random.Random, subject: str, qtype: str, stage: str) -> Question:
    return rng.choice(BANKS[subject][qtype])(rng, stage)
