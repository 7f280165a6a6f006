//! Typed identities of the fabric: endpoint nodes, routers and router ports.
//!
//! Each is a newtype over the integer the scenario files and JSON reports use; serialisation is
//! transparent and `Display` prints the bare number, so a router reads `3` in a report and in an
//! error message alike. The types keep a node from being passed where a router is expected, and
//! a router port from being mistaken for a global (network-wide) port number.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $int);

        impl $name {
            /// Position in per-item tables.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id!(
    /// An endpoint node (one NIC), numbered from 0 in the order the topology builds them.
    NodeId(u32)
);
id!(
    /// A router (switch chip), numbered from 0 in the order the topology builds them.
    RouterId(u32)
);
id!(
    /// A port of one router, numbered from 0 up to the router's port count.
    PortIdx(u16)
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FailedLink;
    use crate::topology::Peer;

    #[test]
    fn ids_read_and_print_as_plain_integers() {
        let peer = Peer::Router {
            router: RouterId(3),
            port: PortIdx(2),
        };
        assert_eq!(
            serde_json::to_string(&peer).unwrap(),
            r#"{"kind":"router","router":3,"port":2}"#
        );
        let link: FailedLink = serde_json::from_str(r#"{"router": 3, "port": 2}"#).unwrap();
        assert_eq!(
            link,
            FailedLink {
                router: RouterId(3),
                port: PortIdx(2)
            }
        );
        assert!(serde_json::from_str::<FailedLink>(r#"{"router": 3, "port": 70000}"#).is_err());
        assert_eq!(
            format!("node {} router {:>3}", NodeId(7), RouterId(12)),
            "node 7 router  12"
        );
        assert_eq!((NodeId(9).index(), PortIdx(4).index()), (9, 4));
    }
}
