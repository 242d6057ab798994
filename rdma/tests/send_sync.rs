//! Which types may cross threads.

use rdma::*;

fn send_sync<T: Send + Sync>() {}

#[test]
fn verbs_objects_are_send_and_sync() {
    send_sync::<DeviceList>();
    send_sync::<Context>();
    send_sync::<ProtectionDomain>();
    send_sync::<MemoryRegion>();
    send_sync::<CompletionChannel>();
    send_sync::<CompletionQueue>();
    send_sync::<QueuePair>();
    send_sync::<SharedReceiveQueue>();
    send_sync::<AddressHandle>();
    send_sync::<Error>();
    send_sync::<Sge<'static>>();
    send_sync::<RemoteMemory>();
    send_sync::<WorkCompletion>();
}
