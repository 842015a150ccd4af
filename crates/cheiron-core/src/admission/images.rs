//! The images a Pod pulls: `image` of each entry of `spec.containers`, `spec.initContainers`
//! and `spec.ephemeralContainers`, read while the admitted object is parsed, everything else
//! of a container skipped. Only `injection: MatchingImages` needs them (docs/design.md §5).
//!
//! Read leniently: a list or entry of another shape contributes no image instead of making
//! the object uninterpretable, since nothing else of admission depends on these fields (the
//! apiserver has decoded the Pod before it calls the webhook, so real Pods always fit).

use std::fmt;

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};

/// The image references of one container list, in order; entries without an image are left
/// out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ContainerImages(pub(super) Vec<String>);

impl<'de> Deserialize<'de> for ContainerImages {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ListVisitor)
    }
}

struct ListVisitor;

impl<'de> Visitor<'de> for ListVisitor {
    type Value = ContainerImages;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of containers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut images = Vec::new();
        while let Some(Container(image)) = seq.next_element()? {
            images.extend(image);
        }
        Ok(ContainerImages(images))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ContainerImages::default())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ContainerImages::default())
    }
}

/// One container: its `image` when that is a string.
struct Container(Option<String>);

impl<'de> Deserialize<'de> for Container {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ContainerVisitor)
    }
}

struct ContainerVisitor;

impl<'de> Visitor<'de> for ContainerVisitor {
    type Value = Container;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a container")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut image = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Image => image = map.next_value::<Text>()?.0,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Container(image))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Container(None))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Container(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Container(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Container(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Container(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Container(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Container(None))
    }
}

/// A container's field name: `image` or anything else (not kept).
enum Key {
    Image,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(if key == "image" {
                    Key::Image
                } else {
                    Key::Other
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// A string, or nothing when the value is of another shape.
struct Text(Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an image reference")
            }
            fn visit_str<E>(self, text: &str) -> Result<Text, E> {
                Ok(Text(Some(text.to_owned())))
            }
            fn visit_string<E>(self, text: String) -> Result<Text, E> {
                Ok(Text(Some(text)))
            }
            fn visit_unit<E>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn images_are_read_in_order_and_other_shapes_contribute_none() -> Result<(), serde_json::Error>
    {
        let read = |v: serde_json::Value| ContainerImages::deserialize(&v).map(|c| c.0);
        assert_eq!(
            read(json!([
                {"name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}]},
                {"name": "no-image"},
                {"name": "sidecar", "image": "ghcr.io/org/side@sha256:0123"},
            ]))?,
            ["nginx", "ghcr.io/org/side@sha256:0123"]
        );
        for odd in [
            json!(null),
            json!("nginx"),
            json!({"image": "nginx"}),
            json!(3),
            json!([null, 1, "x", ["y"], {"image": 7}, {"image": {"a": 1}}, {"image": null}]),
        ] {
            assert_eq!(read(odd.clone())?, Vec::<String>::new(), "{odd}");
        }
        Ok(())
    }
}
