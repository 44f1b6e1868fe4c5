"""The order in which MariaDB lists the entries of a mysys HASH (mysys/hash.c), which is the
order of the GTIDs in a GTID_LIST event: rpl_binlog_state keeps domains in a HASH keyed by
domain_id and each domain's servers in a HASH keyed by server_id, and lists them by walking
the hash's array.  An insert puts the new record at its bucket and moves the occupant to the
end, so the order depends on the keys' hash values, not only on insertion order.  The relay
needs it to send an artificial GTID_LIST that is byte for byte the primary's."""

from __future__ import annotations

_NO_RECORD = 0xFFFFFFFF
_LOWFIND, _LOWUSED, _HIGHFIND, _HIGHUSED = 1, 2, 4, 8
_MASK32 = 0xFFFFFFFF


def uint32_key_hash(key: int) -> int:
    """my_hash_sort_bin over a little-endian uint32 key (my_charset_bin), as my_hash_sort calls it."""
    nr1, nr2 = 1, 4
    for byte in key.to_bytes(4, "little"):
        nr1 ^= (((nr1 & 63) + nr2) * byte + (nr1 << 8)) & _MASK32
        nr2 += 3
    return nr1 & _MASK32


def _bucket(hash_nr: int, buffmax: int, maxlength: int) -> int:
    """my_hash_mask."""
    if hash_nr & (buffmax - 1) < maxlength:
        return hash_nr & (buffmax - 1)
    return hash_nr & ((buffmax >> 1) - 1)


class HashOrder:
    """The record array of a mysys HASH of integer keys that only ever grows (no deletes)."""

    __slots__ = ("_links", "_blength")

    def __init__(self) -> None:
        self._links: list[list[int]] = []  # [next, hash_nr, key] per slot, as HASH_LINK
        self._blength = 1

    def keys(self) -> list[int]:
        return [link[2] for link in self._links]

    def copy(self) -> HashOrder:
        order = HashOrder()
        order._links = [list(link) for link in self._links]
        order._blength = self._blength
        return order

    def insert(self, key: int) -> None:
        """my_hash_insert of a key not present yet."""
        links, blength = self._links, self._blength
        records = len(links)
        links.append([_NO_RECORD, 0, 0])
        empty = self._split_bucket(records)
        current = uint32_key_hash(key)
        pos = _bucket(current, blength, records + 1)
        if pos != empty:  # move the occupant to the free slot, and its chain link with it
            links[empty] = list(links[pos])
            home = _bucket(links[pos][1], blength, records + 1)
            if home == pos:
                links[pos][0] = empty
            else:
                links[pos][0] = _NO_RECORD
                self._relink(pos, home, empty)
        else:
            links[pos][0] = _NO_RECORD
        links[pos][1], links[pos][2] = current, key
        if records + 1 == blength:
            self._blength = blength * 2

    def _split_bucket(self, records: int) -> int:
        """The first loop of my_hash_insert: the chain of the bucket that splits as the table
        grows is divided between its low and high halves; returns the slot left free."""
        links, blength = self._links, self._blength
        empty = records
        halfbuff = blength >> 1
        idx = first_index = records - halfbuff
        if idx == records:
            return empty
        flag = 0
        low = high = 0  # slots the low / high chain's pending record goes to
        low_rec: tuple[int, int] = (0, 0)
        high_rec: tuple[int, int] = (0, 0)
        while True:
            pos = idx
            hash_nr, key = links[pos][1], links[pos][2]
            if flag == 0 and _bucket(hash_nr, blength, records) != first_index:
                break
            if not hash_nr & halfbuff:  # stays in the low bucket
                if not flag & _LOWFIND:
                    if flag & _HIGHFIND:
                        flag = _LOWFIND | _HIGHFIND
                        low, low_rec, empty = empty, (hash_nr, key), pos
                    else:
                        flag = _LOWFIND | _LOWUSED
                        low, low_rec = pos, (hash_nr, key)
                else:
                    if not flag & _LOWUSED:
                        links[low][1], links[low][2], links[low][0] = low_rec[0], low_rec[1], pos
                        flag = (flag & _HIGHFIND) | _LOWFIND | _LOWUSED
                    low, low_rec = pos, (hash_nr, key)
            else:  # moves to the high bucket
                if not flag & _HIGHFIND:
                    flag = (flag & _LOWFIND) | _HIGHFIND
                    high, empty, high_rec = empty, pos, (hash_nr, key)
                else:
                    if not flag & _HIGHUSED:
                        links[high][1], links[high][2], links[high][0] = high_rec[0], high_rec[1], pos
                        flag = (flag & _LOWFIND) | _HIGHFIND | _HIGHUSED
                    high, high_rec = pos, (hash_nr, key)
            idx = links[pos][0]
            if idx == _NO_RECORD:
                break
        if flag & (_LOWFIND | _LOWUSED) == _LOWFIND:
            links[low][1], links[low][2], links[low][0] = low_rec[0], low_rec[1], _NO_RECORD
        if flag & (_HIGHFIND | _HIGHUSED) == _HIGHFIND:
            links[high][1], links[high][2], links[high][0] = high_rec[0], high_rec[1], _NO_RECORD
        return empty

    def _relink(self, find: int, start: int, new: int) -> None:
        """movelink: the chain from ``start`` that led to ``find`` leads to ``new`` instead."""
        links = self._links
        link = start
        while links[link][0] != find:
            link = links[link][0]
        links[link][0] = new
