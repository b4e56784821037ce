//! The slots behind L_Keys and R_Keys, shared by every memory table (the
//! device's regions in rxe-verbs, [`VecMemory`](super::VecMemory) in tests).
//!
//! A key's upper 24 bits index a slot (index 0 is never used, so key 0
//! names nothing); its low 8 bits are the key portion, which the slot
//! advances at every registration, so that a key of an earlier
//! registration in the same slot fails with a key mismatch (IBTA 10.6.3.x,
//! the consumer-owned key portion, not checked against the text;
//! `ibv_inc_rkey(3)`). A freed slot is reused before the table grows, the
//! most recently freed first.

use super::memory::{Key, MemError};

#[derive(Debug, Clone)]
struct Slot<T> {
    /// The key portion the next registration in this slot gets.
    next_key: u8,
    entry: Option<(Key, T)>,
}

/// Entries by key: each insertion gets a fresh key.
#[derive(Debug, Clone)]
pub struct KeyTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
    live: usize,
    /// The index of the first slot (1 unless the table holds a range of
    /// its own, as memory windows do).
    first: u32,
}

impl<T> Default for KeyTable<T> {
    fn default() -> KeyTable<T> {
        KeyTable {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            first: 1,
        }
    }
}

impl<T> KeyTable<T> {
    pub fn new() -> KeyTable<T> {
        KeyTable::default()
    }

    /// A table whose keys have indexes from `first` (at least 1) up, so
    /// that two tables never hand out the same index.
    pub fn with_first_index(first: u32) -> KeyTable<T> {
        KeyTable {
            first: first.clamp(1, Key::MAX_INDEX),
            ..KeyTable::default()
        }
    }

    /// Changes the key portion of the entry `key` names exactly to `key`
    /// (a memory window's bind); returns the new key.
    pub fn rekey(&mut self, key: Key, portion: u8) -> Option<Key> {
        let i = self.slot_of(key)?;
        let (k, _) = self.slots.get_mut(i)?.entry.as_mut()?;
        if *k != key {
            return None;
        }
        *k = key.with_key(portion);
        Some(*k)
    }

    fn slot_of(&self, key: Key) -> Option<usize> {
        key.index().checked_sub(self.first).map(|i| i as usize)
    }

    /// How many entries the table holds.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Stores `make(key)` under a new key; [`MemError::Overflow`] once
    /// every one of the 2^24 - 1 indexes is in use.
    pub fn insert_with(&mut self, make: impl FnOnce(Key) -> T) -> Result<Key, MemError> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                if self.slots.len() > (Key::MAX_INDEX - self.first) as usize {
                    return Err(MemError::Overflow);
                }
                self.slots.push(Slot {
                    next_key: 0,
                    entry: None,
                });
                self.slots.len() - 1
            }
        };
        let first = self.first;
        let s = &mut self.slots[slot];
        // The slot count is bounded by MAX_INDEX above, so this fits.
        let key = Key::from_parts(slot as u32 + first, s.next_key).ok_or(MemError::Overflow)?;
        s.next_key = s.next_key.wrapping_add(1);
        s.entry = Some((key, make(key)));
        self.live += 1;
        Ok(key)
    }

    fn slot(&self, key: Key) -> Option<&Slot<T>> {
        self.slots.get(self.slot_of(key)?)
    }

    /// The entry in `key`'s slot whatever its key portion, with the key it
    /// was stored under: a caller tells an unknown key (`None`) from a key
    /// mismatch (a different key back).
    pub fn by_index(&self, key: Key) -> Option<(Key, &T)> {
        self.slot(key)?.entry.as_ref().map(|(k, v)| (*k, v))
    }

    /// The entry `key` names exactly (index and key portion).
    pub fn get(&self, key: Key) -> Option<&T> {
        match self.by_index(key)? {
            (k, v) if k == key => Some(v),
            _ => None,
        }
    }

    /// As [`KeyTable::by_index`], mutably.
    pub fn by_index_mut(&mut self, key: Key) -> Option<(Key, &mut T)> {
        let i = self.slot_of(key)?;
        self.slots.get_mut(i)?.entry.as_mut().map(|(k, v)| (*k, v))
    }

    /// As [`KeyTable::get`], mutably.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let i = self.slot_of(key)?;
        match self.slots.get_mut(i)?.entry.as_mut()? {
            (k, v) if *k == key => Some(v),
            _ => None,
        }
    }

    /// Removes the entry `key` names exactly; afterwards the key fails.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        self.get(key)?;
        let i = self.slot_of(key)?;
        let (_, v) = self.slots[i].entry.take()?;
        self.free.push(i);
        self.live -= 1;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_one_registration_each() {
        let mut t = KeyTable::new();
        let a = t.insert_with(|_| "a").unwrap();
        let b = t.insert_with(|_| "b").unwrap();
        assert_eq!((a.index(), a.key(), b.index()), (1, 0, 2));
        assert_eq!((t.get(a), t.get(b), t.len()), (Some(&"a"), Some(&"b"), 2));
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None, "removed once");
        // The freed slot comes back with the next key portion: the old key
        // fails as a mismatch, not as an unknown key.
        let c = t
            .insert_with(|k| if k.index() == 1 { "c" } else { "?" })
            .unwrap();
        assert_eq!((c.index(), c.key()), (1, 1));
        assert_eq!(t.get(a), None);
        assert_eq!(t.by_index(a), Some((c, &"c")));
        assert_eq!(t.by_index(Key::new(0)), None, "index 0 names nothing");
        assert_eq!(t.by_index(Key::from_parts(9, 0).unwrap()), None);
        *t.get_mut(c).unwrap() = "d";
        assert_eq!(t.get(c), Some(&"d"));
        assert!(t.get_mut(a).is_none());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_table_of_its_own_range() {
        let mut t = KeyTable::with_first_index(0x80_0000);
        let a = t.insert_with(|_| 1).unwrap();
        assert_eq!(a.index(), 0x80_0000);
        assert_eq!(t.by_index(Key::from_parts(1, 0).unwrap()), None);
        let b = t.rekey(a, 0x42).unwrap();
        assert_eq!((b.index(), b.key()), (a.index(), 0x42));
        assert_eq!(t.get(a), None, "the old key portion fails");
        assert_eq!(t.get(b), Some(&1));
        assert_eq!(t.rekey(a, 1), None);
        assert_eq!(t.remove(b), Some(1));
    }

    #[test]
    fn the_key_portion_wraps_in_a_slot() {
        let mut t = KeyTable::new();
        let mut last = Key::new(0);
        for _ in 0..300 {
            last = t.insert_with(|_| ()).unwrap();
            t.remove(last).unwrap();
        }
        assert_eq!((last.index(), last.key()), (1, (299 % 256) as u8));
        assert!(t.is_empty());
    }
}
