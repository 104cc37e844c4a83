"""The normalizer, rule by rule: written form in, spoken form out (a table a reviewer can read),
sentence splitting around abbreviations, inline and lexicon overrides, the SSML subset, and
bounded cost on hostile input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_queue.books.sources.segment import split_sentences
from tts_queue.errors import ConfigError, InvalidSSML, UnsupportedSSML
from tts_queue.synthesis.frontend.normalize import expand, normalize
from tts_queue.synthesis.frontend.script import read_lexicon, script_of, written
from tts_queue.synthesis.frontend.ssml import script_of_ssml
from tts_queue.synthesis.frontend.text import clean_text

# (category, written, spoken): every category the normalizer reads, and text that must be left alone.
CASES = [
    # cardinal
    ('cardinal', 'I have 3 cats.', 'I have three cats.'),
    ('cardinal', 'There were 42 people.', 'There were forty-two people.'),
    ('cardinal', 'He scored 100 points.', 'He scored one hundred points.'),
    ('cardinal', 'It has 1,000 pages.', 'It has one thousand pages.'),
    ('cardinal', 'About 1,234,567 people.',
     'About one million two hundred thirty-four thousand five hundred sixty-seven people.'),
    ('cardinal', 'We need 0 more.', 'We need zero more.'),
    ('cardinal', 'It weighs 7 tons.', 'It weighs seven tons.'),
    ('cardinal', 'Buy 12 eggs.', 'Buy twelve eggs.'),
    ('cardinal', 'She is 99.', 'She is ninety-nine.'),
    ('cardinal', 'Count to 1000000.', 'Count to one million.'),
    ('cardinal', 'Seats: 250', 'Seats: two hundred fifty'),
    ('cardinal', 'Room 101', 'Room one hundred one'),
    ('cardinal', 'Exactly 2500 apples', 'Exactly two thousand five hundred apples'),
    ('cardinal', 'Only 11 left', 'Only eleven left'),
    ('cardinal', 'It took 365 days.', 'It took three hundred sixty-five days.'),
    # ordinal
    ('ordinal', 'He came 1st.', 'He came first.'),
    ('ordinal', 'She was 2nd.', 'She was second.'),
    ('ordinal', 'The 3rd time.', 'The third time.'),
    ('ordinal', 'The 4th of July.', 'The fourth of July.'),
    ('ordinal', 'On the 21st floor.', 'On the twenty-first floor.'),
    ('ordinal', 'The 22nd day.', 'The twenty-second day.'),
    ('ordinal', 'The 23rd try.', 'The twenty-third try.'),
    ('ordinal', 'The 100th visitor.', 'The one hundredth visitor.'),
    ('ordinal', 'The 11th hour.', 'The eleventh hour.'),
    ('ordinal', 'The 12th man.', 'The twelfth man.'),
    ('ordinal', 'The 13th floor.', 'The thirteenth floor.'),
    ('ordinal', 'The 101st run.', 'The one hundred first run.'),
    # decimal
    ('decimal', 'Pi is 3.14.', 'Pi is three point one four.'),
    ('decimal', 'It is 0.5 meters.', 'It is zero point five meters.'),
    ('decimal', 'Grew 2.75 times.', 'Grew two point seven five times.'),
    ('decimal', 'Value: 10.01', 'Value: ten point zero one'),
    ('decimal', 'Rate of 1.5', 'Rate of one point five'),
    ('decimal', 'It read 98.6 on the scale.', 'It read ninety-eight point six on the scale.'),
    # negative
    ('negative', 'It is -5 outside.', 'It is minus five outside.'),
    ('negative', 'Drop to -12.5 now.', 'Drop to minus twelve point five now.'),
    ('negative', 'A loss of −3.', 'A loss of minus three.'),
    # fraction
    ('fraction', 'Add 1/2 cup.', 'Add one half cup.'),
    ('fraction', 'Use 3/4 of it.', 'Use three quarters of it.'),
    ('fraction', 'About 2/3 of them.', 'About two thirds of them.'),
    ('fraction', 'Cut 5/8 inch.', 'Cut five eighths inch.'),
    ('fraction', 'Mix 1 1/2 cups of flour.', 'Mix one and one half cups of flour.'),
    ('fraction', 'Add 1 3/4 cups.', 'Add one and three quarters cups.'),
    ('fraction', 'Open 24/7.', 'Open twenty-four seven.'),
    ('fraction', 'Only 1/3 left.', 'Only one third left.'),
    ('fraction', 'Take 1/4 tsp. salt.', 'Take one quarter of a teaspoon salt.'),
    ('fraction', 'A ratio of 7/3.', 'A ratio of seven slash three.'),
    # currency
    ('currency', 'It costs $5.', 'It costs five dollars.'),
    ('currency', 'It costs $1.', 'It costs one dollar.'),
    ('currency', 'It costs $5.50.', 'It costs five dollars and fifty cents.'),
    ('currency', 'It costs $0.99.', 'It costs ninety-nine cents.'),
    ('currency', 'It costs $1,250.', 'It costs one thousand two hundred fifty dollars.'),
    ('currency', 'Pay $2 million.', 'Pay two million dollars.'),
    ('currency', 'Pay $3.5 billion.', 'Pay three point five billion dollars.'),
    ('currency', 'It costs €20.', 'It costs twenty euros.'),
    ('currency', 'It costs £3.50.', 'It costs three pounds and fifty pence.'),
    ('currency', 'It costs ¥500.', 'It costs five hundred yen.'),
    ('currency', 'Raised $5M.', 'Raised five million dollars.'),
    ('currency', 'It costs $1.01.', 'It costs one dollar and one cent.'),
    ('currency', 'It costs $12.05.', 'It costs twelve dollars and five cents.'),
    # date
    ('date', 'On 07/04/2025 we met.', 'On July fourth, twenty twenty-five we met.'),
    ('date', 'Born 12/25/1990.', 'Born December twenty-fifth, nineteen ninety.'),
    ('date', 'Due 1/2/2024.', 'Due January second, twenty twenty-four.'),
    ('date', 'On 2025-07-04.', 'On July fourth, twenty twenty-five.'),
    ('date', 'On 3/15/99.', 'On March fifteenth, nineteen ninety-nine.'),
    ('date', 'On Feb. 2, 2024.', 'On February second, twenty twenty-four.'),
    ('date', 'On February 2, 2024.', 'On February second, twenty twenty-four.'),
    ('date', 'Tue., Feb. 2nd at noon.', 'Tuesday, February second at noon.'),
    ('date', 'On 2 February 2024.', 'On the second of February twenty twenty-four.'),
    ('date', 'By March 3rd.', 'By March third.'),
    ('date', 'In Dec. 1999.', 'In December nineteen ninety-nine.'),
    ('date', 'On Sept. 11, 2001.', 'On September eleventh, two thousand one.'),
    ('date', 'On Jan. 1st.', 'On January first.'),
    # time
    ('time', 'At 3:00 PM.', 'At three PM.'),
    ('time', 'At 10:30 a.m.', 'At ten thirty AM.'),
    ('time', 'At 7 p.m. today.', 'At seven PM today.'),
    ('time', 'At 10am.', 'At ten AM.'),
    ('time', 'At 9:05.', 'At nine oh five.'),
    ('time', 'At 12:00.', "At twelve o'clock."),
    ('time', 'At 6:45 pm.', 'At six forty-five PM.'),
    ('time', 'At 11:15 AM.', 'At eleven fifteen AM.'),
    ('time', 'At 8 AM.', 'At eight AM.'),
    ('time', 'At 23:00.', 'At twenty-three hundred.'),
    ('time', 'At 4:30:15.', 'At four thirty and fifteen seconds.'),
    # percent
    ('percent', 'Up 15%.', 'Up fifteen percent.'),
    ('percent', 'Down 3.5%.', 'Down three point five percent.'),
    ('percent', 'About 100%.', 'About one hundred percent.'),
    ('percent', 'Only 0.1%.', 'Only zero point one percent.'),
    # units
    ('units', 'Run 5 km.', 'Run five kilometers.'),
    ('units', 'I ran 5km.', 'I ran five kilometers.'),
    ('units', 'It weighs 1 kg.', 'It weighs one kilogram.'),
    ('units', 'It is 10 lbs.', 'It is ten pounds.'),
    ('units', 'Add 2 tsp. salt.', 'Add two teaspoons salt.'),
    ('units', 'Add 1 tbsp. oil.', 'Add one tablespoon oil.'),
    ('units', 'Drive 60 mph.', 'Drive sixty miles per hour.'),
    ('units', 'Pour 250 ml.', 'Pour two hundred fifty milliliters.'),
    ('units', 'Add 2 oz. cheese.', 'Add two ounces cheese.'),
    ('units', 'It is 3.5 GB.', 'It is three point five gigabytes.'),
    ('units', 'It runs at 2 GHz.', 'It runs at two gigahertz.'),
    ('units', 'A 100 W bulb.', 'A one hundred watts bulb.'),
    ('units', 'Walk 3 mi.', 'Walk three miles.'),
    ('units', 'It is 6 ft tall.', 'It is six feet tall.'),
    ('units', 'Add 1 tsp of salt.', 'Add one teaspoon of salt.'),
    ('units', 'It is 5 cm long.', 'It is five centimeters long.'),
    # temperature
    ('temperature', 'It is 25°C.', 'It is twenty-five degrees Celsius.'),
    ('temperature', 'It is 72°F.', 'It is seventy-two degrees Fahrenheit.'),
    ('temperature', 'It is 72 °F.', 'It is seventy-two degrees Fahrenheit.'),
    ('temperature', 'Bake at 350°F.', 'Bake at three hundred fifty degrees Fahrenheit.'),
    ('temperature', 'It fell to -5°C.', 'It fell to minus five degrees Celsius.'),
    ('temperature', 'Turn it 90°.', 'Turn it ninety degrees.'),
    ('temperature', 'It is 1°C.', 'It is one degree Celsius.'),
    # abbreviation
    ('abbreviation', 'Mr. Holmes arrived.', 'Mister Holmes arrived.'),
    ('abbreviation', 'Mrs. Hudson called.', 'Missus Hudson called.'),
    ('abbreviation', 'Ms. Adler sang.', 'Miz Adler sang.'),
    ('abbreviation', 'Dr. Watson wrote.', 'Doctor Watson wrote.'),
    ('abbreviation', 'Prof. Moriarty fled.', 'Professor Moriarty fled.'),
    ('abbreviation', 'Capt. Smith steered.', 'Captain Smith steered.'),
    ('abbreviation', 'Gen. Lee surrendered.', 'General Lee surrendered.'),
    ('abbreviation', 'Apples vs. oranges.', 'Apples versus oranges.'),
    ('abbreviation', 'Fruit, nuts, etc. are fine.', 'Fruit, nuts, et cetera are fine.'),
    ('abbreviation', 'Bring food, e.g. bread.', 'Bring food, for example bread.'),
    ('abbreviation', 'One thing, i.e. this.', 'One thing, that is this.'),
    ('abbreviation', 'See p. 12.', 'See page twelve.'),
    ('abbreviation', 'See No. 5.', 'See number five.'),
    ('abbreviation', 'See Fig. 3.', 'See figure three.'),
    ('abbreviation', 'Acme Inc. is big.', 'Acme Incorporated is big.'),
    ('abbreviation', 'Lt. Dan came.', 'Lieutenant Dan came.'),
    ('abbreviation', 'Rev. Green preached.', 'Reverend Green preached.'),
    ('abbreviation', 'John Smith Jr. spoke.', 'John Smith Junior spoke.'),
    ('abbreviation', 'Sgt. Pepper played.', 'Sergeant Pepper played.'),
    # saint_street
    ('saint_street', 'He lives at 221B Baker St. in London.',
     'He lives at two hundred twenty-one B Baker Street in London.'),
    ('saint_street', 'He lives on Baker St. The house is old.',
     'He lives on Baker Street. The house is old.'),
    ('saint_street', "St. James's Park is green.", "Saint James's Park is green."),
    ('saint_street', "Visit St. Paul's today.", "Visit Saint Paul's today."),
    ('saint_street', 'The church of St. Mary is old.', 'The church of Saint Mary is old.'),
    ('saint_street', 'Meet on Main St. tomorrow.', 'Meet on Main Street tomorrow.'),
    ('saint_street', 'He walked down 5th St. slowly.', 'He walked down fifth Street slowly.'),
    ('saint_street', 'St. Louis is a city.', 'Saint Louis is a city.'),
    ('saint_street', 'Meet me on Mulholland Dr. tomorrow.', 'Meet me on Mulholland Drive tomorrow.'),
    ('saint_street', 'Dr. Jones is here.', 'Doctor Jones is here.'),
    # weekday_month
    ('weekday_month', 'Tue., Feb. 2nd', 'Tuesday, February second'),
    ('weekday_month', 'Mon. and Wed. only', 'Mon. and Wednesday only'),
    ('weekday_month', 'Open Fri. and Sat.', 'Open Friday and Saturday'),
    ('weekday_month', 'Due Thurs., Oct. 5th.', 'Due Thursday, October fifth.'),
    ('weekday_month', 'From Jan. to Mar.', 'From January to March'),
    ('weekday_month', 'Back Aug. 3rd.', 'Back August third.'),
    ('weekday_month', 'Since Nov. 2020.', 'Since November twenty twenty.'),
    ('weekday_month', 'On Sun., Apr. 7th.', 'On Sunday, April seventh.'),
    # roman
    ('roman', 'Louis XIV was king.', 'Louis the fourteenth was king.'),
    ('roman', 'Henry VIII married often.', 'Henry the eighth married often.'),
    ('roman', 'Elizabeth II reigned long.', 'Elizabeth the second reigned long.'),
    ('roman', 'Elizabeth I was queen.', 'Elizabeth the first was queen.'),
    ('roman', 'Pope Pius IX spoke.', 'Pope Pius the ninth spoke.'),
    ('roman', 'George III was mad.', 'George the third was mad.'),
    ('roman', 'Chapter XIV', 'Chapter fourteen'),
    ('roman', 'Chapter IV begins.', 'Chapter four begins.'),
    ('roman', 'Part II is long.', 'Part two is long.'),
    ('roman', 'World War II ended.', 'World War two ended.'),
    ('roman', 'Act III, Scene II.', 'Act three, Scene two.'),
    ('roman', 'Book XII', 'Book twelve'),
    ('roman', 'I. A Scandal in Bohemia', 'One. A Scandal in Bohemia'),
    ('roman', 'XII. The Adventure of the Copper Beeches', 'Twelve. The Adventure of the Copper Beeches'),
    ('roman', 'Super Bowl LVII was close.', 'Super Bowl fifty-seven was close.'),
    ('roman', 'Richard III died.', 'Richard the third died.'),
    # phone
    ('phone', 'Call 555-123-4567.', 'Call five five five, one two three, four five six seven.'),
    ('phone', 'Call (555) 123-4567.', 'Call five five five, one two three, four five six seven.'),
    ('phone', 'Call 555.123.4567 now.', 'Call five five five, one two three, four five six seven now.'),
    ('phone', 'Call +1-555-123-4567.', 'Call one, five five five, one two three, four five six seven.'),
    ('phone', 'Dial 555-1234.', 'Dial five five five, one two three four.'),
    ('phone', 'Call 800-555-0199 today.', 'Call eight zero zero, five five five, zero one nine nine today.'),
    # year
    ('year', 'In 1885, he left.', 'In eighteen eighty-five, he left.'),
    ('year', 'Born in 1990.', 'Born in nineteen ninety.'),
    ('year', 'Since 2001 it grew.', 'Since two thousand one it grew.'),
    ('year', 'The year 2024 was good.', 'The year twenty twenty-four was good.'),
    ('year', 'By 1066 it was done.', 'By ten sixty-six it was done.'),
    ('year', 'In 2005 they met.', 'In two thousand five they met.'),
    ('year', 'From 1939 to 1945.', 'From nineteen thirty-nine to nineteen forty-five.'),
    ('year', 'The 1990s were fun.', 'The nineteen nineties were fun.'),
    ('year', 'The 1880s were hard.', 'The eighteen eighties were hard.'),
    ('year', 'Around 1900 it began.', 'Around nineteen hundred it began.'),
    ('year', 'In 753 BC Rome rose.', 'In seven hundred fifty-three B C Rome rose.'),
    ('year', "The '90s were loud.", "The 'nineties were loud."),
    ('year', 'From 1990-1995 he worked.', 'From nineteen ninety to nineteen ninety-five he worked.'),
    # url_email
    ('url_email', 'Mail john.smith@example.com now.', 'Mail john dot smith at example dot com now.'),
    ('url_email', 'Visit https://www.example.com/docs.', 'Visit w w w dot example dot com slash docs.'),
    ('url_email', 'See example.org today.', 'See example dot org today.'),
    ('url_email', 'Write to help@tts.io.', 'Write to help at tts dot io.'),
    ('url_email', 'Go to www.python.org.', 'Go to w w w dot python dot org.'),
    ('url_email', 'Open http://localhost.dev/a-b.', 'Open localhost dot dev slash a dash b.'),
    # symbols
    ('symbols', 'Tom & Jerry', 'Tom and Jerry'),
    ('symbols', 'R&D costs', 'R and D costs'),
    ('symbols', 'A & B', 'A and B'),
    ('symbols', '#1 fan', 'number one fan'),
    ('symbols', 'Use #python tags', 'Use hashtag python tags'),
    ('symbols', 'Meet @home', 'Meet at home'),
    ('symbols', 'and/or', 'and or'),
    ('symbols', 'he/she', 'he or she'),
    ('symbols', '2 + 2 = 4', 'two plus two equals four'),
    ('symbols', 'He is ~30.', 'He is about thirty.'),
    ('symbols', 'It is 3 × 4.', 'It is three times four.'),
    ('symbols', 'Pages 10-20', 'Pages ten to twenty'),
    ('symbols', 'COVID-19 spread.', 'COVID nineteen spread.'),
    ('symbols', 'Apt. 4B', 'Apartment four B'),
    ('symbols', 'AT&T', 'AT and T'),
    # left_alone
    ('left_alone', 'Hello world.', 'Hello world.'),
    ('left_alone', 'I think so.', 'I think so.'),
    ('left_alone', 'The cat sat on the mat.', 'The cat sat on the mat.'),
    ('left_alone', 'MIX it well.', 'MIX it well.'),
    ('left_alone', 'CD players are old.', 'CD players are old.'),
    ('left_alone', 'DIM the lights.', 'DIM the lights.'),
    ('left_alone', 'I am here.', 'I am here.'),
    ('left_alone', 'She said, "Come in!"', 'She said, "Come in!"'),
    ('left_alone', "It's a dog's life.", "It's a dog's life."),
    ('left_alone', 'Well... maybe.', 'Well... maybe.'),
    ('left_alone', 'The end.', 'The end.'),
    ('left_alone', 'A B C', 'A B C'),
    ('left_alone', 'C++ is a language.', 'C++ is a language.'),
    ('left_alone', 'Version 2 is out.', 'Version two is out.'),
]
DMY = [
    ("07/04/2025", "April seventh, twenty twenty-five"),
    ("25/12/1990", "December twenty-fifth, nineteen ninety"),
    ("2025-07-04", "July fourth, twenty twenty-five"),  # ISO dates have one order
]
SPLITS = [  # (text, sentences the book splitter makes): abbreviations never end a sentence
    ("Tue., Feb. 2nd at noon. Next one.", ["Tue., Feb. 2nd at noon.", "Next one."]),
    ("Add 2 tsp. salt and 1 tbsp. oil. Stir.", ["Add 2 tsp. salt and 1 tbsp. oil.", "Stir."]),
    ("We met at 3 p.m. on Mon., Jan. 5th. Good.", ["We met at 3 p.m. on Mon., Jan. 5th.", "Good."]),
    ("Open Fri. and Sat. only. Fine.", ["Open Fri. and Sat. only.", "Fine."]),
    ("Mr. Holmes met Dr. Watson on Baker St. in 1885. Then they left.",
     ["Mr. Holmes met Dr. Watson on Baker St. in 1885.", "Then they left."]),
    ("See p. 5. Then go.", ["See p. 5.", "Then go."]),
    ("I said no. Then he left.", ["I said no.", "Then he left."]),  # "no." before a word ends one
    ("I looked at the Sun. It was hot.", ["I looked at the Sun.", "It was hot."]),
    ("\"Come on Tue., Feb. 2nd,\" he said. Then he left.",
     ["\"Come on Tue., Feb. 2nd,\" he said.", "Then he left."]),
    ("Capt. Smith and Prof. Plum came. They sat.", ["Capt. Smith and Prof. Plum came.", "They sat."]),
]


@pytest.mark.parametrize(("category", "text", "spoken"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_written_form_is_read_as_spoken(category: str, text: str, spoken: str) -> None:
    # Given written text (cleaned as every request is)
    # When it is normalized
    # Then it reads as a careful reader would say it
    assert normalize(clean_text(text, 5000)) == spoken


def test_the_table_covers_every_category_with_over_200_cases() -> None:
    categories = {c[0] for c in CASES}
    assert len(CASES) + len(DMY) + len(SPLITS) >= 200
    assert {"cardinal", "ordinal", "decimal", "negative", "fraction", "currency", "date", "time",
            "percent", "units", "temperature", "abbreviation", "saint_street", "weekday_month",
            "roman", "phone", "year", "url_email", "symbols", "left_alone"} <= categories


@pytest.mark.parametrize(("text", "spoken"), DMY)
def test_numeric_dates_follow_the_configured_order(text: str, spoken: str) -> None:
    assert normalize(text, date_order="dmy") == spoken


@pytest.mark.parametrize(("text", "sentences"), SPLITS)
def test_abbreviations_never_end_a_sentence(text: str, sentences: list[str]) -> None:
    # Given text with abbreviation periods
    # Then the book splitter ends sentences only at real sentence ends
    assert split_sentences(text) == sentences


@pytest.mark.parametrize("text", ["Tue., Feb. 2nd", "Mr. Holmes and Dr. Watson", "Add 2 tsp. salt",
                                  "Meet on Sept. 3rd at 10 a.m. sharp"])
def test_no_period_is_left_for_the_phonemizer_to_split_at(text: str) -> None:
    # espeak-ng ends a sentence at every period: the spoken form of these has none
    assert "." not in normalize(text)


def test_tokens_keep_their_written_spans() -> None:
    # Given a sentence with expansions
    text = "On Feb. 2nd, 221B Baker St. cost $5 million."
    tokens = expand(text)
    # Then each token points back at what was written, in order, and covers every written word
    assert [text[t.start:t.end] for t in tokens] == [
        "On", "Feb.", "2nd,", "221B", "Baker", "St.", "cost", "$5 million."]
    assert [t.spoken for t in tokens][-3:] == ["Street", "cost", "five million dollars."]


def test_normalize_false_reads_the_text_as_written() -> None:
    assert script_of("It costs $5 on Tue.", normalize=False) == (("text", "It costs $5 on Tue."),)
    assert script_of("It costs $5 on Tue.") == (("text", "It costs five dollars on Tuesday"),)


# --- overrides ------------------------------------------------------------------------------------


def test_inline_override_becomes_phonemes_and_captions_show_the_word() -> None:
    text = "Say [tomato](/təˈmɑːtoʊ/) twice, at 5."
    assert script_of(text) == (("text", "Say"), ("ipa", "təˈmɑːtoʊ"), ("text", "twice, at five.")
                               )
    assert written(text) == "Say tomato twice, at 5."


def test_ordinary_markdown_links_are_not_overrides() -> None:
    assert script_of("See [the docs](https://example.com) now.")[0][0] == "text"
    assert all(kind == "text" for kind, _ in script_of("A [link](/path/to/page) here."))


def test_lexicon_entries_give_phonemes_or_respellings(tmp_path: Path) -> None:
    path = tmp_path / "lexicon.tsv"
    path.write_text("# names\nNguyen\t/ŋwɪn/\nWorcester\tWooster\n\n", encoding="utf-8")
    lexicon = read_lexicon(path)
    assert lexicon == {"Nguyen": "/ŋwɪn/", "Worcester": "Wooster"}
    assert script_of("Mr. Nguyen of Worcester.", lexicon=lexicon) == (
        ("text", "Mister"), ("ipa", "ŋwɪn"), ("text", "of Wooster."))
    # the lexicon applies with normalize off too (it is pronunciation, not normalization)
    assert script_of("Nguyen 5", normalize=False, lexicon=lexicon) == (("ipa", "ŋwɪn"), ("text", "5"))


@pytest.mark.parametrize("content", ["no tab here\n", "two words\t/x/\n", "word\t\n", "w\t/<x>/\n"])
def test_a_malformed_lexicon_is_a_config_error_naming_the_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "lexicon.tsv"
    path.write_text("ok\tfine\n" + content, encoding="utf-8")
    with pytest.raises(ConfigError, match="TTS_LEXICON"):
        read_lexicon(path)


# --- SSML -----------------------------------------------------------------------------------------


def test_the_ssml_subset_becomes_a_script() -> None:
    ssml = ('<speak>Hello <break time="500ms"/> it is <say-as interpret-as="characters">ABC</say-as>, '
            '<say-as interpret-as="cardinal">1,234</say-as> and <say-as interpret-as="ordinal">3</say-as>. '
            '<sub alias="World Wide Web">WWW</sub> <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme>'
            '<prosody rate="slow">Slow $5.</prosody><p>Para.</p>'
            '<s>Call <say-as interpret-as="telephone">555-1234</say-as></s></speak>')
    assert script_of_ssml(ssml) == (
        ("text", "Hello"), ("break", "500"),
        ("text", "it is eigh B C, one thousand two hundred thirty-four and third. World Wide Web"),
        ("ipa", "təˈmɑːtoʊ"), ("rate", "0.75"), ("text", "Slow five dollars."), ("rate", "1"),
        ("text", "Para."), ("break", "600"), ("text", "Call five five five, one two three four"),
        ("break", ""))


def test_say_as_date_takes_its_format() -> None:
    assert script_of_ssml('<speak><say-as interpret-as="date" format="dmy">04/07/2025</say-as></speak>') == (
        ("text", "July fourth, twenty twenty-five"),)
    assert script_of_ssml('<speak><say-as interpret-as="date">04/07/2025</say-as></speak>') == (
        ("text", "April seventh, twenty twenty-five"),)


@pytest.mark.parametrize(("ssml", "error", "message"), [
    ("<speak><say-as interpret-as='date' format='ymd'>1</say-as></speak>", UnsupportedSSML, "ymd"),
    ("<speak><foo>x</foo></speak>", UnsupportedSSML, "<foo>"),
    ("<speak><audio src='x.wav'/></speak>", UnsupportedSSML, "<audio>"),
    ("<speak><prosody pitch='high'>x</prosody></speak>", UnsupportedSSML, "pitch"),
    ("<speak><say-as interpret-as='unit'>5</say-as></speak>", UnsupportedSSML, "unit"),
    ("<speak><phoneme alphabet='x-sampa' ph='x'>a</phoneme></speak>", UnsupportedSSML, "x-sampa"),
    ("<speak>Hello", InvalidSSML, "line 1, column"),
    ("<speak>a\n<b>c</speak>", InvalidSSML, "line 2"),
    ("<voice>x</voice>", InvalidSSML, "root element must be <speak>"),
    ("<speak><break time='forever'/></speak>", InvalidSSML, "break"),
    ("<speak><break time='60s'/></speak>", InvalidSSML, "longest"),
    ("<speak>a" + "<break time='10s'/>a" * 7 + "</speak>", InvalidSSML, "most one request"),
    ("<speak>" + "<p>a</p>" * 101 + "</speak>", InvalidSSML, "most one request"),
    ("<speak><prosody rate='900%'>x</prosody></speak>", InvalidSSML, "rate"),
    ("<speak><say-as interpret-as='cardinal'>abc</say-as></speak>", InvalidSSML, "not a number"),
    ("<speak>" + "<p>" * 1500 + "x" + "</p>" * 1500 + "</speak>", InvalidSSML, "nest more than"),
    ('<!DOCTYPE s [<!ENTITY a "aaaa">]><speak>&a;</speak>', InvalidSSML, "DTD"),
    ('<!DOCTYPE s [<!ENTITY a "x"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><speak>&b;</speak>',
     InvalidSSML, "DTD"),
])
def test_bad_ssml_is_a_clear_400(ssml: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        script_of_ssml(ssml)
    assert getattr(info.value, "http_status", None) == 400


@pytest.mark.parametrize(("kind", "value", "said"), [
    ("ordinal", "-5", "minus fifth"), ("ordinal", "−3", "minus third"), ("cardinal", "-5", "minus five"),
    ("ordinal", "0", "zeroth"), ("number", "-12", "minus twelve"),
])
def test_say_as_reads_negative_ordinals_and_cardinals(kind: str, value: str, said: str) -> None:
    ssml = f"<speak><say-as interpret-as='{kind}'>{value}</say-as></speak>"
    assert script_of_ssml(ssml) == (("text", said),)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(kind=st.sampled_from(["cardinal", "number", "ordinal", "telephone", "characters"]),
       value=st.one_of(st.integers(-10**40, 10**40).map(str),
                       st.text(alphabet="-−+.,0123456789١٢³²eE ", max_size=30)))
def test_say_as_of_any_number_is_read_or_a_400_never_a_crash(kind: str, value: str) -> None:
    # Given a say-as of any value, signs, separators and odd digits included
    ssml = f"<speak><say-as interpret-as='{kind}'>{value}</say-as></speak>"
    # Then it is read, or refused as invalid SSML (a 400), and nothing else is raised
    try:
        script = script_of_ssml(ssml)
    except InvalidSSML as exc:
        assert exc.http_status == 400
    else:
        assert all(isinstance(part, str) for _, part in script)


# --- bounded cost -----------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["1" * 300, "9" * 4999, "1.2.3.4." * 600, "a.a@b" * 900, "$" + "1," * 2000,
                                  "Mr. " * 1200, "12/12/12/" * 500, "IVXLCDM" * 700, "(" * 4000 + ")"])
def test_expansion_is_bounded_and_linear(unit: str) -> None:
    # Given hostile text within the request limit, and its first quarter
    text = unit[:5000]
    quarter = text[: len(text) // 4]
    # When each is normalized (the CPU time of the best of three runs: a burst of load elsewhere
    # only lengthens a run)
    def cpu(sample: str) -> float:
        runs = []
        for _ in range(3):
            started = time.thread_time()
            normalize(sample)
            runs.append(time.thread_time() - started)
        return min(runs)

    spoken = normalize(text)
    # Then the spoken form grows by a bounded factor, and four times the text costs at most about
    # four times the time (a quadratic pass would cost sixteen; 2 ms covers the clock's grain)
    assert len(spoken) <= 12 * len(text) + 20
    assert cpu(text) <= 8 * cpu(quarter) + 0.002


def test_a_300_digit_number_is_read_digit_by_digit() -> None:
    assert normalize("1" + "0" * 300) == "one" + " zero" * 300


def test_markdown_books_keep_only_slash_targets_as_overrides() -> None:
    from tts_queue.synthesis.frontend.markdown_inline import strip_inline

    text = strip_inline("Say [tomato](/təˈmɑːtoʊ/), see [the docs](https://x.com) and [a page](/a/b) *now*.")
    assert text == "Say [tomato](/təˈmɑːtoʊ/), see the docs and a page now."
    assert written(text) == "Say tomato, see the docs and a page now."
    assert ("ipa", "təˈmɑːtoʊ") in script_of(text)


_PIECES = list("0123456789$€£%°&@#+=/.,:;-−'\"()[] aAIVXLCpm") + [
    "St.", "Dr.", "Mr.", "Feb.", "Tue.", "a.m.", "PM", "1/2", "Louis", "Chapter", "http://", ".com", "km",
    "°C", "(555)", "123-4567", "[x](/ab/)", "<", ">"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=40).map("".join))
def test_any_mix_of_rule_triggers_normalizes_without_error(text: str) -> None:
    # Given any mix of the pieces the rules look for
    # Then the frontend makes a script (never an exception), bounded in size
    for order in ("mdy", "dmy"):
        script = script_of(text, date_order=order)
        assert sum(len(value) for _, value in script) <= 12 * len(text) + 20


def test_an_inline_override_must_be_ipa() -> None:
    from tts_queue.errors import InvalidText

    with pytest.raises(InvalidText, match="not IPA"):
        script_of("Say [x](/a<b/) now.")


def test_the_lexicon_applies_to_text_without_any_rule_trigger() -> None:
    # a plain sentence (the one-search path) still gets its lexicon words, with or without rules
    lexicon = {"Holmes": "/hoʊmz/"}
    assert ("ipa", "hoʊmz") in script_of("I saw Holmes today", lexicon=lexicon)
    assert ("ipa", "hoʊmz") in script_of("I saw Holmes today", normalize=False, lexicon=lexicon)
    assert script_of("I saw Watson today", lexicon=lexicon) == (("text", "I saw Watson today"),)


def test_book_options_take_the_normalize_flag_from_forms_and_json() -> None:
    from tts_queue.books.sources.upload import book_options
    from tts_queue.errors import InvalidRequest

    assert book_options({"normalize": "false"})["normalize"] is False
    assert book_options({"normalize": True})["normalize"] is True
    with pytest.raises(InvalidRequest, match="normalize"):
        book_options({"normalize": 3})
