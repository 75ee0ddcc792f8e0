//! Times as the wire writes them: RFC 3339 parsed (Anthropic's resets,
//! a client record's `expires`) and written (events), and UTC calendar
//! days. Pure: formats and parses, never reads the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An RFC 3339 time (`2025-01-01T00:00:30Z`, `…T00:00:30.5+01:00`), as
/// Anthropic writes its resets; `None` for anything else.
pub fn rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0_u64;
    if b.get(at) == Some(&b'.') {
        let end = s[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(s.len(), |i| at + 1 + i);
        let frac = &s[at + 1..end];
        if frac.is_empty() {
            return None;
        }
        let kept = &frac[..frac.len().min(9)];
        nanos = kept.parse::<u64>().ok()? * 10_u64.pow(9 - kept.len() as u32);
        at = end;
    }
    let offset = match &s[at..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && matches!(tz.as_bytes()[0], b'+' | b'-')
            && tz.as_bytes()[3] == b':' =>
        {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, u32::try_from(nanos).ok()?))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The UTC calendar date `(year, month, day)` of a day count since
/// 1970-01-01 (Howard Hinnant's civil-from-days; valid for every date this
/// program will see).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Formats Unix seconds as RFC 3339 UTC.
pub fn rfc3339_of(secs: u64, millis: u32) -> String {
    Timestamp::of(secs, millis).to_string()
}

/// A time as [`rfc3339_of`] writes it (`2026-12-06T09:30:00.123Z`), held
/// in place: an event carries one without an allocation. It reads as a
/// `&str` and is written and read as a JSON string (one written otherwise
/// is kept as it came).
#[derive(Clone, PartialEq, Eq)]
pub enum Timestamp {
    /// The 24 ASCII bytes [`rfc3339_of`] writes.
    Written([u8; 24]),
    /// A time read back in another form.
    Read(String),
}

impl Timestamp {
    /// `secs` and `millis` since the Unix epoch, in UTC.
    pub fn of(secs: u64, millis: u32) -> Self {
        // Events come many a second: the date and time of the last second
        // written on this thread are kept, and only the milliseconds change.
        thread_local! {
            static LAST: std::cell::Cell<(u64, [u8; 24])> =
                const { std::cell::Cell::new((u64::MAX, [0; 24])) };
        }
        let (last, mut out) = LAST.get();
        if last != secs {
            out = Self::second(secs);
            LAST.set((secs, out));
        }
        put_digits(&mut out[20..23], u64::from(millis % 1000));
        Self::Written(out)
    }

    /// `secs` written in full (milliseconds zero).
    fn second(secs: u64) -> [u8; 24] {
        let rem = secs % 86_400;
        let (year, month, day) = civil_from_days((secs / 86_400) as i64);
        // Written digit by digit into a template: `format!` was a visible
        // share of the hot path's instructions (one timestamp per
        // generation).
        let mut out = *b"0000-00-00T00:00:00.000Z";
        put_digits(&mut out[0..4], year.max(0) as u64);
        put_digits(&mut out[5..7], u64::from(month));
        put_digits(&mut out[8..10], u64::from(day));
        put_digits(&mut out[11..13], rem / 3600);
        put_digits(&mut out[14..16], (rem % 3600) / 60);
        put_digits(&mut out[17..19], rem % 60);
        out
    }
}

impl std::ops::Deref for Timestamp {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            // Only ASCII digits went into the template.
            Self::Written(b) => std::str::from_utf8(b).unwrap_or(""),
            Self::Read(s) => s,
        }
    }
}

impl std::fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(match <[u8; 24]>::try_from(text.as_bytes()) {
            Ok(bytes) => Self::Written(bytes),
            Err(_) => Self::Read(text),
        })
    }
}

/// Writes the last `slot.len()` decimal digits of `n` into `slot`,
/// zero-padded.
fn put_digits(slot: &mut [u8], mut n: u64) {
    for b in slot.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// Times of one second and of others in turn each read back as
    /// themselves (the thread keeps the last second written).
    #[test]
    fn each_timestamp_is_its_own_time_whatever_came_before() {
        let (a, b) = (1_764_979_200, 951_868_799);
        for (secs, millis) in [
            (a, 5),
            (a, 999),
            (b, 0),
            (a, 7),
            (a, 7),
            (b + 1, 120),
            (0, 1),
        ] {
            let text = Timestamp::of(secs, millis);
            let want = at(secs) + Duration::from_millis(u64::from(millis));
            assert_eq!(rfc3339(&text), Some(want), "{text}");
        }
    }

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(rfc3339("2000-03-01T00:00:00Z"), Some(at(951_868_800)));
        assert_eq!(
            rfc3339("2024-02-29T12:00:00-02:30"),
            Some(at(1_709_217_000))
        );
        assert_eq!(
            rfc3339("2025-01-01T00:00:00.123456789123Z"),
            Some(at(1_735_689_600) + Duration::from_nanos(123_456_789))
        );
        for bad in [
            "",
            "2025-01-01",
            "2025-13-01T00:00:00Z",
            "2025-01-01T24:00:00Z",
            "2025-01-01T00:00:00",
            "2025-01-01T00:00:00+0100",
            "2025-01-01T00:00:00.Z",
            "1969-12-31T23:59:59Z",
            "2025-01-01T00:00:00Zjunk",
            "２025-01-01T00:00:00Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }
}
