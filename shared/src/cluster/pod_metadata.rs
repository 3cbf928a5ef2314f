//! Pods' metadata, listed in protobuf.
//!
//! The hostport port view needs one annotation per pod, but a metadata list carries each
//! pod's `managedFields` too: ~2.2 KB a pod, 22 MB at 10,000 stacks. Asked for JSON, the local
//! apiserver spent ~340 ms of CPU on such a list; asked for protobuf, ~80 ms (client-go's
//! metadata client asks for protobuf too). kube speaks only JSON, so this one call is made by
//! hand; the messages below declare only the fields read, with the tag numbers of
//! `k8s.io/apimachinery`'s `generated.proto`, and prost skips everything else.

use std::collections::BTreeMap;

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::ObjectList;
use kube::{Client, Resource};
use prost::Message;
use prost::bytes::Bytes;

use super::{ClusterError, ProtobufError};

const OPERATION: &str = "list pod metadata";
/// What protobuf responses begin with, before their `runtime.Unknown` envelope.
const MAGIC: &[u8] = b"k8s\0";
const ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// `metav1.ObjectMeta`, the fields read.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct PodMetadata {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(btree_map = "string, string", tag = "12")]
    pub(crate) annotations: BTreeMap<String, String>,
}

/// `runtime.Unknown`: the envelope of every protobuf response.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "bytes", tag = "2")]
    raw: Bytes,
}

/// `metav1.PartialObjectMetadataList`.
#[derive(Clone, PartialEq, Message)]
struct PartialObjectMetadataList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<PartialObjectMetadata>,
}

/// `metav1.PartialObjectMetadata`.
#[derive(Clone, PartialEq, Message)]
struct PartialObjectMetadata {
    #[prost(message, optional, tag = "1")]
    metadata: Option<PodMetadata>,
}

/// `metav1.ListMeta`.
#[derive(Clone, PartialEq, Message)]
struct ListMeta {
    #[prost(string, tag = "3")]
    continue_token: String,
}

/// One page of the metadata of the pods `params` selects in `namespace`. kube's own
/// `request_stream` sends it and turns an error answer (JSON `Status`, whatever was asked for,
/// or a proxy's text) into `kube::Error::Api`, as for every other call.
pub(crate) async fn list_page(
    client: &Client,
    namespace: &str,
    params: &ListParams,
) -> Result<ObjectList<PodMetadata>, ClusterError> {
    let url = Pod::url_path(&(), Some(namespace));
    let mut request = kube::core::Request::new(url)
        .list(params)
        .map_err(|e| ClusterError::from_kube(OPERATION, kube::Error::BuildRequest(e)))?;
    request
        .headers_mut()
        .insert(http::header::ACCEPT, http::HeaderValue::from_static(ACCEPT));
    let mut body = Vec::new();
    client
        .request_stream(request)
        .await
        .map_err(|e| ClusterError::from_kube(OPERATION, e))?
        .read_to_end(&mut body)
        .await
        .map_err(|e| ClusterError::from_kube(OPERATION, kube::Error::ReadEvents(e)))?;
    decode_page(Bytes::from(body)).map_err(|source| ClusterError::Undecodable {
        operation: OPERATION,
        source,
    })
}

/// A list page from a protobuf answer.
fn decode_page(body: Bytes) -> Result<ObjectList<PodMetadata>, ProtobufError> {
    let list = PartialObjectMetadataList::decode(unwrap_envelope(body)?)?;
    Ok(ObjectList {
        types: Default::default(),
        metadata: kube::core::ListMeta {
            continue_: list.metadata.map(|m| m.continue_token).filter(|t| !t.is_empty()),
            ..Default::default()
        },
        items: list.items.into_iter().filter_map(|item| item.metadata).collect(),
    })
}

fn unwrap_envelope(body: Bytes) -> Result<Bytes, ProtobufError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoEnvelope)?;
    Ok(Unknown::decode(envelope)?.raw)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Two pages as the local apiserver (v1.34) answered `limit=1` for two labelled pods, one
    /// with the host-ports annotation, captured with this module's `Accept` header.
    const FIRST_PAGE: &[u8] = include_bytes!("testdata/pod-metadata-page-1.pb");
    const LAST_PAGE: &[u8] = include_bytes!("testdata/pod-metadata-page-2.pb");
    /// The apiserver's answer to such a list with a malformed label selector (400).
    const BAD_SELECTOR: &[u8] = include_bytes!("testdata/pod-metadata-bad-selector.json");

    #[test]
    fn a_page_from_the_apiserver_gives_names_annotations_and_the_continue_token() {
        let first = decode_page(Bytes::from_static(FIRST_PAGE)).expect("decodes");
        assert_eq!(first.items.len(), 1);
        assert_eq!(first.items[0].name, "probe-a");
        assert_eq!(
            first.items[0]
                .annotations
                .get("stack-provisioner/host-ports")
                .map(String::as_str),
            Some("31001,31002")
        );
        assert!(first.metadata.continue_.as_deref().is_some_and(|t| t.len() > 10));

        let last = decode_page(Bytes::from_static(LAST_PAGE)).expect("decodes");
        assert_eq!(last.items.len(), 1);
        assert_eq!(last.items[0].name, "probe-b");
        assert!(last.items[0].annotations.is_empty());
        assert_eq!(last.metadata.continue_, None, "the last page");
    }

    #[test]
    fn a_json_or_garbled_body_is_not_taken_for_a_page() {
        assert!(decode_page(Bytes::from_static(br#"{"kind":"PartialObjectMetadataList"}"#)).is_err());
        assert!(decode_page(Bytes::from_static(b"k8s\0\x12\xff")).is_err());
    }

    /// `list_page` through our client against a server that gives `answer` to one request.
    async fn list_page_answered(answer: Vec<u8>) -> Result<ObjectList<PodMetadata>, ClusterError> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let _ = socket.read(&mut request).await.unwrap();
            socket.write_all(&answer).await.unwrap();
        });
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let client = super::super::client_builder(&config).unwrap().build();
        list_page(&client, "stacks", &ListParams::default()).await
    }

    fn http_answer(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        [head.as_bytes(), body].concat()
    }

    #[tokio::test]
    async fn a_protobuf_answer_is_read_and_error_answers_are_sorted_like_every_call() {
        let page = list_page_answered(http_answer("200 OK", ACCEPT, FIRST_PAGE))
            .await
            .expect("a page");
        assert_eq!(page.items[0].name, "probe-a");

        // The apiserver's JSON Status: a 400 is the input's fault.
        let refused = list_page_answered(http_answer("400 Bad Request", "application/json", BAD_SELECTOR)).await;
        let Err(ClusterError::Rejected(why)) = refused else {
            panic!("{refused:?}")
        };
        assert!(why.contains("expected: !, identifier"), "{why}");

        // A proxy's text in between, with a 503: worth trying again.
        let unavailable = list_page_answered(http_answer(
            "503 Service Unavailable",
            "text/plain",
            b"upstream connect error\n",
        ))
        .await;
        let Err(ClusterError::Unavailable {
            source: kube::Error::Api(status),
            ..
        }) = unavailable
        else {
            panic!("{unavailable:?}")
        };
        assert_eq!((status.code, status.message.as_str()), (503, "upstream connect error"));
    }
}
