//! Messages cheiron shows to others (HTTP error bodies, status conditions, Events) are
//! bounded: a serde or API message may quote its input, and that input is not ours to repeat
//! at length. The rule for their length is plain text, so it is here, below the status the
//! core computes; the rules that read a client's errors are in the runtime's `message`.

/// Longest message of a status condition.
pub(crate) const MAX_CONDITION_MESSAGE: usize = 1024;

/// Cuts `message` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn truncate(message: &mut String, max: usize) {
    if message.len() <= max {
        return;
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push('…');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_messages_are_left_alone() {
        let mut m = "short".to_owned();
        truncate(&mut m, 10);
        assert_eq!(m, "short");
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary_and_marked() {
        let mut m = "é".repeat(10);
        truncate(&mut m, 5);
        assert_eq!(m, "éé…");
    }
}
