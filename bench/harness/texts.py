"""What the scenarios say: everyday English sentences of mixed lengths (``SENTENCES``), and made-up
long ones, unique each, in English and Japanese (``english_sentences``, ``japanese_text``)."""

from __future__ import annotations

import itertools
import random

SENTENCES = """\
Good morning.
The train was late again.
Please close the door behind you when you leave the room.
She opened the window and let the cold air in.
We will meet at the old bridge at noon, unless it rains.
Thank you very much.
The library keeps its oldest maps in a dry room on the top floor, away from the light.
He counted the coins twice before he put them back in the jar.
Where are you going?
A small boat drifted across the quiet lake while the sun went down behind the western hills.
The kettle is boiling.
Our neighbour grows tomatoes, beans and three kinds of lettuce in a tiny garden behind the house.
Nobody knew who had left the letter on the kitchen table.
It was the coldest winter anyone could remember, and the river froze from December to March.
Turn left at the next corner.
The museum opens at nine and closes at five on weekdays.
I have read that book three times and I still find something new in it.
Yes.
The engineer checked every bolt on the bridge before the first heavy lorry was allowed across.
Bring an umbrella.
When the storm passed, the streets were full of branches, and the whole town came out to help.
The cat slept on the warm stones all afternoon.
Could you speak a little more slowly, please?
The orchestra played the last movement so quietly that the audience hardly dared to breathe.
""".splitlines()

ADJECTIVES = ("quiet", "patient", "crooked", "silver", "distant", "careful", "weary", "bright", "humble",
              "restless", "gentle", "stubborn", "ancient", "narrow", "golden", "hollow")
NOUNS = ("keeper", "sailor", "baker", "painter", "teacher", "miller", "farmer", "doctor", "weaver",
         "hunter", "printer", "tailor", "porter", "gardener", "fiddler", "shepherd")
PLACES = ("harbour", "orchard", "market", "chapel", "meadow", "library", "station", "bridge", "garden",
          "mill", "valley", "square", "tavern", "forest", "courtyard", "lighthouse")
VERBS = ("carried", "followed", "painted", "mended", "answered", "watched", "gathered", "described",
         "remembered", "measured", "questioned", "discovered")


def english_sentences(n: int, seed: int) -> list[str]:
    """``n`` unique long English sentences (about 25 words, no digits)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while len(seen) < n:
        a, b, c = rng.sample(ADJECTIVES, 3)
        n1, n2, n3 = rng.sample(NOUNS, 3)
        p1, p2 = rng.sample(PLACES, 2)
        v1, v2 = rng.sample(VERBS, 2)
        seen.add(f"The {a} {n1} from the {p1} {v1} the {b} {n2} all the way across the {p2}, "
                 f"while an old {c} {n3} {v2} every word of the story until the evening grew late.")
    return sorted(seen, key=lambda s: rng.random())


JA_WHO = ("私の兄", "隣の猫", "町の先生", "若い医者", "古い友人", "小さな子供", "山の猟師", "海辺の漁師")
JA_WHERE = ("駅の前で", "静かな森で", "川のほとりで", "古い寺で", "市場の片隅で", "雨の公園で",
            "夜の図書館で", "雪の峠で")
JA_WHAT = ("長い手紙を書きました", "懐かしい歌を歌いました", "白い花を摘みました", "分厚い本を読みました",
           "大きな魚を釣りました", "美しい絵を描きました", "すっかり道に迷いました", "不思議な昔話をしました")
JA_WHEN = ("朝早く", "昼過ぎに", "夕方になって", "夜遅く")


def japanese_text(chars: int, seed: int) -> str:
    """About ``chars`` characters of unique Japanese sentences."""
    combos = list(itertools.product(JA_WHEN, JA_WHO, JA_WHERE, JA_WHAT))
    random.Random(seed).shuffle(combos)
    text = ""
    for when, who, where, what in combos:
        if len(text) >= chars:
            break
        text += f"{when}、{who}は{where}{what}。"
    return text
