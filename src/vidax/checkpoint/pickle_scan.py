"""A check of a pickle's opcodes before the C unpickler runs them: no opcode may cost more than its bytes.

The restricted unpickler (:mod:`vidax.checkpoint.torch_pickle`) decides which callables a pickle
may reach, but CPython's C unpickler trusts a few numbers in the stream, and a hostile
``data.pkl`` of a few bytes can exhaust memory or time through them before any callable runs:

* a memo index: ``LONG_BINPUT 0x10000000`` (9 bytes in all) makes the C unpickler grow its memo
  array to twice the index and zero it, 4 GiB for that value (``_Unpickler_MemoPut`` in
  ``Modules/_pickle.c``); measured here, index ``2**25`` took 512 MiB of resident memory;
* a declared length (``BINUNICODE``, ``BINBYTES8``, ``FRAME``): the C unpickler allocates the
  declared size of some of them before reading;
* hashing dict keys and set items. CPython does not cache a tuple's hash, and a pickle's memo can
  put one tuple in both halves of another: 60 such levels (300 bytes) make a key whose hash visits
  2**60 items. And ints are hashed without a random seed, so ``k * (2**61 - 1)`` for many ``k``
  all collide (tuples of ints can be made to collide for any target hash): a dict built from N such
  keys costs N**2 / 2 comparisons, hours for a few MiB of pickle, inside one opcode.

:func:`scan_pickle` walks the opcodes once, keeping for each stack entry only what hashing it
would cost (no objects are built), and refuses, naming the offset: an unknown opcode, a length
past the end of the data, a memo index beyond the number of memo writes so far (picklers number
memo entries 0, 1, 2, ..., so the memo stays within the opcode count), an integer wider than 64
bits (no size, offset or key needs more; within 64 bits at most 8 ints share a hash), and dict
keys / set items other than plain scalars (str, bytes, int, float, bool, None: strings are hashed
with a per-process random seed, the rest collide a few dozen to a hash at most) whose hashing
costs more than :data:`MAX_KEY_COST` in all (a tuple costs its size as a tree, anything else 1).
That bounds both the exponential hash and the collisions: K colliding keys of total cost C
cost at most K * C <= C**2 comparisons. The cost of the scan is one pass of Python over the
opcodes, about 0.2 microseconds per opcode (a tensor in a ``torch.save`` state dict is ~30).

Source of the opcode set and arguments: ``Lib/pickletools.py`` (protocols 0-5).
"""

from __future__ import annotations

from vidax.checkpoint.errors import CheckpointError

#: Total hashing cost of the dict keys and set items that are not str / bytes / int / float /
#: bool / None, per pickle (a tuple costs its size as a tree, a frozenset its length, anything
#: else 1). State dicts key by strings (optimizer states by ints); a tuple or dtype key is rare:
#: 4096 is over a thousand pair keys, and keeps the worst case (all of them colliding) near
#: 4096**2 = 1.7e7 comparisons, a fraction of a second.
MAX_KEY_COST = 4096
_SATURATED = 2**40  # costs stop growing here (no bigint arithmetic on 2**60-item tuples)

#: Widest integer literal accepted, in bytes (sizes, offsets and strides all fit in int64).
MAX_INT_BYTES = 8

# Opcode classes (what the opcode does to the stack), for the dispatch in scan_pickle.
(_PUSH_SCALAR, _COUNTED, _PUT, _GET, _MARK, _TUPLE_N, _TO_MARK, _POP1_PUSH, _POP2_PUSH, _POP3_PUSH,
 _POP1, _SETITEM, _PUSH_OTHER, _DUP, _POP, _LONG1, _LINE, _GLOBAL, _INST, _PROTO, _FRAME, _MEMOIZE,
 _STOP, _NOOP) = range(24)

_OPS: dict[int, tuple[int, int]] = {}  # opcode byte -> (class, argument size or length-field size)


def _op(code: str, cls: int, arg: int = 0) -> None:
    _OPS[ord(code)] = (cls, arg)


for _c, _n in (("N", 0), ("\x88", 0), ("\x89", 0), ("K", 1), ("M", 2), ("J", 4), ("G", 8)):
    _op(_c, _PUSH_SCALAR, _n)  # None, True, False, BININT1/2/4, BINFLOAT
# Counted strings and bytes: (length-field size); negative = signed length field.
for _c, _n in (("X", 4), ("\x8c", 1), ("\x8d", 8), ("C", 1), ("B", 4), ("\x8e", 8), ("U", 1), ("T", -4)):
    _op(_c, _COUNTED, _n)
_op("\x96", _COUNTED, 8)  # BYTEARRAY8 (a bytearray: unhashable, but it is a value all the same)
_op("q", _PUT, 1), _op("r", _PUT, 4), _op("h", _GET, 1), _op("j", _GET, 4)
_op("(", _MARK)
_op(")", _TUPLE_N, 0), _op("\x85", _TUPLE_N, 1), _op("\x86", _TUPLE_N, 2), _op("\x87", _TUPLE_N, 3)
for _c in "tld\x91oe\x90u1":  # TUPLE LIST DICT FROZENSET OBJ APPENDS ADDITEMS SETITEMS POP_MARK
    _op(_c, _TO_MARK)
_op("Q", _POP1_PUSH)  # BINPERSID
_op("R", _POP2_PUSH), _op("\x81", _POP2_PUSH), _op("\x93", _POP2_PUSH)  # REDUCE NEWOBJ STACK_GLOBAL
_op("\x92", _POP3_PUSH)  # NEWOBJ_EX
_op("a", _POP1), _op("b", _POP1)  # APPEND BUILD
_op("s", _SETITEM)
_op("]", _PUSH_OTHER), _op("}", _PUSH_OTHER), _op("\x8f", _PUSH_OTHER), _op("\x97", _PUSH_OTHER)
_op("\x82", _PUSH_OTHER, 1), _op("\x83", _PUSH_OTHER, 2), _op("\x84", _PUSH_OTHER, 4)  # EXT1/2/4
_op("2", _DUP), _op("0", _POP)
_op("\x8a", _LONG1)
for _c in "ILFSVPpg":  # INT LONG FLOAT STRING UNICODE PERSID PUT GET (protocol 0: argument up to a newline)
    _op(_c, _LINE)
_op("c", _GLOBAL), _op("i", _INST)
_op("\x80", _PROTO, 1), _op("\x95", _FRAME, 8), _op("\x94", _MEMOIZE), _op(".", _STOP)
_op("\x98", _NOOP)  # READONLY_BUFFER
# LONG4 ('\x8b') is absent on purpose: an integer of 256 bytes or more is never a checkpoint value.

_BUILDS_FROM_MARK = {ord(c) for c in "tld\x91o"}  # TUPLE LIST DICT FROZENSET OBJ push their result
_KEYED = {ord("d"), ord("u")}  # keys are every other item above the mark
_SET_LIKE = {ord("\x91"), ord("\x90")}  # every item above the mark is a set item
_SCALAR_LINE = {ord("I"), ord("L"), ord("F"), ord("S"), ord("V")}
_MAX_DECIMAL = 21  # "-9223372036854775808L"


def scan_pickle(data: bytes, where: str) -> None:
    """Check a pickle's opcodes before unpickling it (see the module docstring for what and why).

    Args:
      data: the whole pickle (``bytes``); nothing after its ``STOP`` opcode is read.
      where: the file (and record) named in errors.

    Raises:
      CheckpointError: naming ``where`` and the byte offset, for an unknown opcode or protocol, a
        length or memo index out of range, a stack underflow, a missing ``STOP``, an integer wider
        than :data:`MAX_INT_BYTES`, or non-scalar dict keys / set items costing more than
        :data:`MAX_KEY_COST` to hash.
    """
    n = len(data)
    stack: list[int] = []  # per entry, its hashing cost: 0 for a plain scalar (hash-safe), else >= 1
    marks: list[int] = []
    fence = 0  # the stack length at the innermost MARK: opcodes may not pop below it
    memo: dict[int, int] = {}
    puts = key_cost = i = 0
    fail = _Fail(where)
    try:
        while True:
            op = data[i]
            # The opcodes of a torch.save state dict, most frequent first; the rest go by the table.
            if op == 0x72 or op == 0x71:  # LONG_BINPUT, BINPUT
                if op == 0x72:
                    idx = int.from_bytes(data[i + 1 : i + 5], "little")
                    i += 5
                else:
                    idx = data[i + 1]
                    i += 2
                if idx > puts or len(stack) <= fence or i > n:
                    raise fail(i, f"memo index {idx} after {puts} memo writes, or nothing to store")
                memo[idx] = stack[-1]
                puts += 1
            elif op == 0x4B:  # BININT1
                stack.append(0)
                i += 2
            elif op == 0x68:  # BINGET
                stack.append(memo[data[i + 1]])
                i += 2
            elif op == 0x58:  # BINUNICODE
                i += 5 + int.from_bytes(data[i + 1 : i + 5], "little")
                if i > n:
                    raise fail(i, f"a string runs past the end of the data ({n} bytes)")
                stack.append(0)
            elif op == 0x52:  # REDUCE
                if len(stack) - fence < 2:
                    raise fail(i, "stack underflow")
                del stack[-1]
                stack[-1] = 1
                i += 1
            elif op == 0x28:  # MARK
                fence = len(stack)
                marks.append(fence)
                i += 1
            elif op == 0x74:  # TUPLE
                if not marks:
                    raise fail(i, "no MARK before this opcode")
                m = marks.pop()
                cost = _tuple_cost(stack[m:])
                del stack[m:]
                fence = marks[-1] if marks else 0
                stack.append(cost)
                i += 1
            elif op == 0x51:  # BINPERSID
                if len(stack) <= fence:
                    raise fail(i, "stack underflow")
                stack[-1] = 1
                i += 1
            elif op == 0x86 or op == 0x89 or op == 0x29:  # TUPLE2, NEWFALSE, EMPTY_TUPLE
                if op == 0x86:
                    if len(stack) - fence < 2:
                        raise fail(i, "stack underflow")
                    cost = 1 + (stack[-1] or 1) + (stack[-2] or 1)
                    del stack[-1]
                    stack[-1] = cost if cost < _SATURATED else _SATURATED
                else:
                    stack.append(op == 0x29)  # an empty tuple costs 1, False 0
                i += 1
            else:
                i, fence, puts, key_cost, done = _general(data, i, op, stack, marks, fence, memo, puts, key_cost, fail)
                if done:
                    return
                if i > n:
                    raise fail(n, "truncated argument")
    except IndexError:
        raise fail(i, "the pickle ends without a STOP opcode (truncated)") from None
    except KeyError as e:
        raise fail(i, f"memo index {e.args[0]} was never written") from None


def _general(data: bytes, i: int, op: int, stack: list[int], marks: list[int], fence: int, memo: dict[int, int],
             puts: int, key_cost: int, fail: _Fail) -> tuple[int, int, int, int, bool]:
    """One opcode other than the common ones of :func:`scan_pickle`; returns its updated state and
    whether the opcode was ``STOP``."""
    n = len(data)
    at = i
    entry = _OPS.get(op)
    if entry is None:
        raise fail(at, f"unknown pickle opcode 0x{op:02x}")
    cls, arg = entry
    i += 1
    if cls == _PUT:
        idx = int.from_bytes(data[i : i + arg], "little")
        i += arg
        if idx > puts or len(stack) <= fence:
            raise fail(at, f"memo index {idx} after {puts} memo writes, or nothing to store")
        memo[idx] = stack[-1]
        puts += 1
    elif cls == _PUSH_SCALAR:
        i += arg
        stack.append(0)
    elif cls == _GET:
        idx = int.from_bytes(data[i : i + arg], "little")
        i += arg
        stack.append(memo[idx])
    elif cls == _COUNTED:
        size_len = -arg if arg < 0 else arg
        if i + size_len > n:
            raise fail(at, "truncated length field")
        size = int.from_bytes(data[i : i + size_len], "little", signed=arg < 0)
        i += size_len + size
        if size < 0 or i > n:
            raise fail(at, f"declared length {size} runs past the end of the data ({n} bytes)")
        stack.append(0 if op != 0x96 else 1)
    elif cls == _TUPLE_N:
        if len(stack) - fence < arg:
            raise fail(at, "stack underflow")
        cost = _tuple_cost(stack[len(stack) - arg :])
        if arg:
            del stack[len(stack) - arg :]
        stack.append(cost)
    elif cls == _TO_MARK:
        if not marks:
            raise fail(at, "no MARK before this opcode")
        m = marks.pop()
        fence = marks[-1] if marks else 0
        items = stack[m:]
        if op in _KEYED:
            if len(items) % 2:
                raise fail(at, "odd number of items for a dict")
            key_cost += sum(items[::2])
        elif op in _SET_LIKE:
            key_cost += sum(items)
        del stack[m:]
        if op == 0x74:  # TUPLE
            stack.append(_tuple_cost(items))
        elif op == 0x91:  # FROZENSET: compared item by item when it is a key itself
            stack.append(min(1 + len(items), _SATURATED))
        elif op in _BUILDS_FROM_MARK:
            stack.append(1)
        elif op != 0x31 and len(stack) <= fence:  # APPENDS SETITEMS ADDITEMS need their target below the mark
            raise fail(at, "stack underflow")
        if key_cost > MAX_KEY_COST:
            raise fail(at, _KEY_COST_MESSAGE)
    elif cls == _POP1_PUSH:
        if len(stack) <= fence:
            raise fail(at, "stack underflow")
        stack[-1] = 1
    elif cls == _POP2_PUSH or cls == _POP3_PUSH:
        k = 2 if cls == _POP2_PUSH else 3
        if len(stack) - fence < k:
            raise fail(at, "stack underflow")
        del stack[len(stack) - k :]
        stack.append(1)
    elif cls == _POP1:
        if len(stack) - fence < 2:
            raise fail(at, "stack underflow")
        stack.pop()
    elif cls == _SETITEM:
        if len(stack) - fence < 3:
            raise fail(at, "stack underflow")
        key_cost += stack[-2]
        del stack[-2:]
        if key_cost > MAX_KEY_COST:
            raise fail(at, _KEY_COST_MESSAGE)
    elif cls == _PUSH_OTHER:
        i += arg
        stack.append(1)
    elif cls == _MARK:
        fence = len(stack)
        marks.append(fence)
    elif cls == _LONG1:
        size = data[i] if i < n else 0
        i += 1 + size
        if size > MAX_INT_BYTES:
            raise fail(at, f"an integer of {size} bytes (at most {MAX_INT_BYTES})")
        stack.append(0)
    elif cls == _LINE:
        end = data.find(b"\n", i)
        if end < 0:
            raise fail(at, "truncated text argument")
        line = data[i:end]
        i = end + 1
        if op in _SCALAR_LINE:
            if op in (0x49, 0x4C) and len(line) > _MAX_DECIMAL:
                raise fail(at, f"an integer literal of {len(line)} characters")
            stack.append(0)
        elif op == 0x50:  # PERSID
            stack.append(1)
        else:  # PUT / GET
            try:
                idx = int(line)
            except ValueError:
                raise fail(at, "memo index is not a number") from None
            if op == 0x70:
                if not 0 <= idx <= puts or len(stack) <= fence:
                    raise fail(at, f"memo index {idx} after {puts} memo writes, or nothing to store")
                memo[idx] = stack[-1]
                puts += 1
            else:
                stack.append(memo[idx])
    elif cls == _GLOBAL or cls == _INST:
        for _ in range(2):
            end = data.find(b"\n", i)
            if end < 0:
                raise fail(at, "truncated global name")
            i = end + 1
        if cls == _INST:
            if not marks:
                raise fail(at, "no MARK before INST")
            del stack[marks.pop() :]
            fence = marks[-1] if marks else 0
        stack.append(1)
    elif cls == _DUP:
        if len(stack) <= fence:
            raise fail(at, "stack underflow")
        stack.append(stack[-1])
    elif cls == _POP:
        if len(stack) > fence:
            stack.pop()
        elif marks:
            marks.pop()
            fence = marks[-1] if marks else 0
        else:
            raise fail(at, "stack underflow")
    elif cls == _MEMOIZE:
        if len(stack) <= fence:
            raise fail(at, "stack underflow")
        memo[len(memo)] = stack[-1]
        puts += 1
    elif cls == _PROTO:
        if i >= n or data[i] > 5:
            raise fail(at, "unsupported pickle protocol")
        i += 1
    elif cls == _FRAME:
        size = int.from_bytes(data[i : i + 8], "little")
        i += 8
        if i > n or size > n - i:
            raise fail(at, f"frame of {size} bytes runs past the end of the data ({n} bytes)")
    elif cls == _STOP:
        if len(stack) <= fence:
            raise fail(at, "stack underflow")
        return i, fence, puts, key_cost, True
    # _NOOP (READONLY_BUFFER): nothing
    return i, fence, puts, key_cost, False


def _tuple_cost(items: list[int]) -> int:
    """Hashing cost of a tuple of entries of these costs: itself, and each item (a scalar costs 1)."""
    cost = 1 + sum(items) + items.count(0)
    return cost if cost < _SATURATED else _SATURATED


_KEY_COST_MESSAGE = (
    f"dict keys or set items other than plain scalars cost more than {MAX_KEY_COST} to hash (nested or "
    "shared tuples, or too many of them)"
)


class _Fail:
    """Builds the CheckpointError of a refused pickle: file, byte offset, reason."""

    def __init__(self, where: str):
        self.where = where

    def __call__(self, at: int, why: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: unsafe or corrupt pickle at byte {at}: {why}")
