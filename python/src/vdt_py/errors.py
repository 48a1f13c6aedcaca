"""One error type for problems a user can fix: the message names the file, key or flag and what to do."""


class VdtError(Exception):
    pass
