"""`kubectl stagger`: a kubectl plugin for people running stagger.

`check-policy FILE` validates a policy file offline with lockd's own loader (`stagger.policy`); `convert
FILE...` prints the stagger policy file a peer's configuration means (straggler, pod-pacemaker,
thundering-herd-scheduler, pod-startup-lock) and what it cannot carry over; `status` shows every staggering
group and every node's lockd; `why POD` says why one pod waits or waited. `status` and `why` need nothing
but a kubeconfig: they find the controller and lockd pods by label and read their `/status` through the
API server's pod proxy.

The parts: the command line and its settings (`__main__`), the policy check (`checkpolicy`), the
conversion of the peers' configurations (`convert/`, pure), the API server's side (`cluster`: pods, the pod
proxy, events), the pure turning of `/status` documents into rows (`report`: status, `explain`: why) and
the printing of rows and documents (`tables`). Errors a person can act on are `problems.Problem`, each with
its exit code.
"""
