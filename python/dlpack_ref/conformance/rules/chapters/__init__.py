"""The rules by chapter, one module a chapter: each rule of any side
(``@rule(side=...)``) beside the subject made to break it (``@breaks``).
Every module here is a chapter, found by listing this package."""

#: The order in which the chapters are read, in reports and in the docs: a
#: rule's place is its side, its chapter's place here, then its place in
#: its chapter. A chapter not named here follows these, by module name.
ORDER = ("versions", "layout", "read_only", "copies", "devices", "dtypes", "ownership", "streams",
         "device_copies", "exchange_api", "errors", "malformed")
