"""The normalizer's rule tables: what written abbreviations, units, currencies and symbols are
read as. Data only; ``normalize.py`` decides when each applies. Keys are matched exactly as
written (case matters where it should: "Dr." the title, "dr." not)."""

from __future__ import annotations

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# Abbreviations read the same wherever they stand (the period is part of the key).
ABBREVIATIONS: dict[str, str] = {
    "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Messrs.": "Messieurs", "Prof.": "Professor",
    "Sr.": "Senior", "Jr.": "Junior", "Mt.": "Mount", "Ft.": "Fort", "Gen.": "General",
    "Capt.": "Captain", "Lt.": "Lieutenant", "Col.": "Colonel", "Sgt.": "Sergeant", "Cpl.": "Corporal",
    "Adm.": "Admiral", "Rev.": "Reverend", "Hon.": "Honorable", "Gov.": "Governor", "Sen.": "Senator",
    "Rep.": "Representative", "Pres.": "President", "Supt.": "Superintendent", "Insp.": "Inspector",
    "Ave.": "Avenue", "Rd.": "Road", "Blvd.": "Boulevard", "Ln.": "Lane", "Hwy.": "Highway",
    "Sq.": "Square", "Ct.": "Court", "Pl.": "Place", "Apt.": "Apartment", "Ste.": "Suite",
    "vs.": "versus", "etc.": "et cetera", "e.g.": "for example", "i.e.": "that is", "cf.": "compare",
    "approx.": "approximately", "dept.": "department", "Dept.": "Department", "est.": "established",
    "Inc.": "Incorporated", "Ltd.": "Limited", "Co.": "Company", "Corp.": "Corporation",
    "Bros.": "Brothers", "Univ.": "University", "Assn.": "Association", "misc.": "miscellaneous",
    "tsp.": "teaspoon", "tbsp.": "tablespoon", "Tbsp.": "tablespoon", "oz.": "ounces", "lb.": "pound",
    "lbs.": "pounds", "pkg.": "package", "qt.": "quart", "doz.": "dozen", "min.": "minutes",
    "hr.": "hour", "hrs.": "hours", "sec.": "seconds", "yr.": "year", "yrs.": "years",
    "a.m.": "AM", "p.m.": "PM", "A.M.": "AM", "P.M.": "PM", "U.S.": "U S", "U.K.": "U K",
    "Jan.": "January", "Feb.": "February", "Mar.": "March", "Apr.": "April", "Jun.": "June",
    "Jul.": "July", "Aug.": "August", "Sep.": "September", "Sept.": "September", "Oct.": "October",
    "Nov.": "November", "Dec.": "December",
    "Mon.": "Monday", "Tue.": "Tuesday", "Tues.": "Tuesday", "Wed.": "Wednesday", "Thu.": "Thursday",
    "Thur.": "Thursday", "Thurs.": "Thursday", "Fri.": "Friday", "Sat.": "Saturday", "Sun.": "Sunday",
}
# Weekday and month abbreviations that are also words or names ("the Sun.", "Jan."): read as
# dates only beside a number, a comma or another date word.
AMBIGUOUS_DATES = frozenset({"Sun.", "Sat.", "Mar.", "Wed.", "Jan.", "Jun.", "Dec.", "Mon."})
DATE_BEFORE = frozenset({"on", "from", "to", "until", "till", "by", "since", "and", "or", "every",
                         "next", "last", "this", "through", "before", "after", "in"})
# Abbreviations after which a sentence may end (said with the period kept when the next word
# starts a sentence): places, companies, units, "etc.". Titles ("Mr.", "Dr.") never end one.
MAY_END = frozenset({"Ave.", "Rd.", "Blvd.", "Ln.", "Hwy.", "Sq.", "Ct.", "Pl.", "etc.", "Inc.",
                     "Ltd.", "Co.", "Corp.", "Bros.", "a.m.", "p.m.", "A.M.", "P.M.", "U.S.", "U.K.",
                     "St.", "Dr.", "oz.", "lb.", "lbs.", "min.", "hr.", "hrs.", "sec.", "yr.", "yrs."})
# Abbreviations read one way before a number: "No. 5", "p. 12", "vol. 3", "Ch. 4", "Fig. 2".
BEFORE_NUMBER: dict[str, str] = {
    "No.": "number", "no.": "number", "Nos.": "numbers", "p.": "page", "pp.": "pages",
    "vol.": "volume", "Vol.": "volume", "ch.": "chapter", "Ch.": "chapter", "fig.": "figure",
    "Fig.": "figure", "ed.": "edition", "art.": "article", "Art.": "article", "sec.": "section",
}

# Units after a number: (singular, plural). Matched exactly, a trailing period dropped first.
UNITS: dict[str, tuple[str, str]] = {
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "yd": ("yard", "yards"), "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"),
    "mg": ("milligram", "milligrams"), "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"), "l": ("liter", "liters"), "L": ("liter", "liters"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"), "gal": ("gallon", "gallons"),
    "qt": ("quart", "quarts"), "tsp": ("teaspoon", "teaspoons"), "tbsp": ("tablespoon", "tablespoons"),
    "Tbsp": ("tablespoon", "tablespoons"), "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "ms": ("millisecond", "milliseconds"), "s": ("second", "seconds"), "sec": ("second", "seconds"),
    "min": ("minute", "minutes"), "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
    "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"), "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"), "GHz": ("gigahertz", "gigahertz"), "W": ("watt", "watts"),
    "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"), "V": ("volt", "volts"),
    "°C": ("degree Celsius", "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"), "sq ft": ("square foot", "square feet"),
}

# Currency signs before an amount: (unit, units, cent, cents).
CURRENCIES: dict[str, tuple[str, str, str, str]] = {
    "$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "sen", "sen"),
    "₹": ("rupee", "rupees", "paisa", "paise"),
}
SCALES = frozenset({"thousand", "million", "billion", "trillion"})
SCALE_SUFFIXES = {"k": "thousand", "K": "thousand", "M": "million", "m": "million", "bn": "billion",
                  "B": "billion", "T": "trillion"}

# Symbols standing alone between words.
SYMBOLS: dict[str, str] = {"&": "and", "@": "at", "+": "plus", "=": "equals", "×": "times",
                           "÷": "divided by", "~": "about", "%": "percent", "#": "number", "/": "or"}

# Names read with an ordinal after them ("Louis XIV" -> "Louis the fourteenth").
REGNAL_NAMES = frozenset({
    "Alexander", "Alfonso", "Amenhotep", "Anne", "Benedict", "Boniface", "Catherine", "Charles",
    "Christian", "Clement", "Constantine", "David", "Edward", "Elizabeth", "Ferdinand", "Francis",
    "Frederick", "George", "Gregory", "Gustav", "Gustavus", "Henry", "Innocent", "Ivan", "James",
    "John", "Joseph", "Leo", "Leopold", "Louis", "Ludwig", "Malcolm", "Mary", "Napoleon", "Nicholas",
    "Paul", "Peter", "Philip", "Pius", "Ptolemy", "Ramesses", "Richard", "Robert", "Rudolf",
    "Sixtus", "Stephen", "Urban", "Victor", "Wilhelm", "William",
})
# Words after which a Roman numeral is a plain number ("Chapter XIV", "World War II").
ROMAN_CARDINAL_AFTER = frozenset({
    "chapter", "part", "book", "volume", "act", "scene", "section", "canto", "war", "phase", "stage",
    "appendix", "article", "title", "psalm", "type", "class", "level", "grade", "step", "bowl",
})
# Words before a bare four-digit number that make it a year ("in 1885", "since 2001").
YEAR_BEFORE = frozenset({"in", "since", "by", "of", "from", "until", "till", "to", "year", "circa",
                         "c.", "before", "after", "during", "around", "summer", "winter", "spring",
                         "autumn", "fall", "early", "late", "mid", "between", "and", "through", "the"})
YEAR_AFTER = frozenset({"BC", "BCE", "AD", "CE", "B.C.", "A.D.", "B.C.E.", "C.E."})
ERAS = {"BC": "B C", "BCE": "B C E", "AD": "eigh D", "CE": "C E", "B.C.": "B C", "A.D.": "eigh D",
        "B.C.E.": "B C E", "C.E.": "C E"}
# Letters are spelled as espeak-ng says them by name: "A" alone is the article, so "eigh".
MERIDIEM = {"am": "AM", "pm": "PM", "AM": "AM", "PM": "PM", "a.m.": "AM", "p.m.": "PM",
            "A.M.": "AM", "P.M.": "PM"}
# Spoken names of characters in URLs and e-mail addresses.
URL_SYMBOLS = {".": "dot", "/": "slash", "@": "at", "-": "dash", "_": "underscore", ":": "colon",
               "?": "question mark", "=": "equals", "&": "and", "#": "hash", "~": "tilde", "+": "plus"}
