//! A cheap hasher for maps whose keys are the configuration's, looked up
//! on every request: the breakers of the configured targets, the metrics
//! writer's handles by provider, the router view's leases, key pools and
//! unavailable providers. SipHash, the standard map's, guards a
//! map that grows with keys a client chooses against crafted collisions;
//! these maps only grow with configured names (a lookup of a client's name
//! adds nothing), so FNV-1a's handful of instructions a byte does (three
//! SipHash lookups cost about 900 instructions of a plain request).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by configured names.
pub type FixedMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A set of configured names.
pub type FixedSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

/// FNV-1a, 64 bits.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    #[inline]
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use super::{FixedMap, Fnv};

    #[test]
    fn fnv1a_of_known_inputs() {
        // The reference values of FNV-1a 64.
        for (input, hash) in [
            ("", 0xcbf2_9ce4_8422_2325),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            let mut h = Fnv::default();
            h.write(input.as_bytes());
            assert_eq!(h.finish(), hash, "{input:?}");
        }
        let mut map: FixedMap<String, u32> = FixedMap::default();
        map.insert("openai".into(), 1);
        assert_eq!(map.get("openai"), Some(&1));
        assert_eq!(map.get("anthropic"), None);
    }
}
