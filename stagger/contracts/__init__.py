"""The wire contracts between stagger's processes, one module each, imported by both ends (docs/contracts.md):

- `lock`: lockd's lock API (`/v1/lock`): the query, every answer body, the release-token header, and the
  reader the init client applies to an answer;
- `groups`: lockd -> the controller's leader (`/v1/groups/grant`, `/v1/groups/wait`) and a controller replica
  -> the leader (`/v1/groups/admit`): each body's type, its sender's builder and its receiver's reader;
- `errors`: the error answer of every API, and `BodyError`, which a reader raises naming the bad field;
- `podtoken`: admission -> lockd, the pod's token volume, by which lockd knows the pod was given a token.

Types, and pure builders and readers: no I/O here.
"""
