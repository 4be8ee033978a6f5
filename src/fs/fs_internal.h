/* fs_internal.h: what fs.c (requests that answer at once, the session), open.c (opens,
 * answered later, their interrupts, and the answers owed at unmount) and handles.c (open
 * files, inodes to nodes) share. */
#ifndef ROIFS_FS_INTERNAL_H
#define ROIFS_FS_INTERNAL_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "../arrays/arrayset.h"
#include "../tree/namespace.h"
#include "devio.h"
#include "fs.h"
#include "passthrough.h"
#include "versions.h"

#define LONG_TIMEOUT 86400.0
/* what the kernel may keep of the input's files and directories that ome = labels reads
 * through, which change under the mount */
#define LIVE_TIMEOUT 1.0

/* What an open file handle refers to. Handles are listed so that those the kernel never
 * released (files still open at unmount) are freed too. */
struct handle {
    struct handle *prev, *next;
    enum ns_kind kind;
    int fd;       /* NS_CHUNK: the cached chunk */
    uint64_t ino; /* NS_CHUNK: the inode it was opened as (vt_release when freed) */
    pid_t pid;    /* NS_STATUS: the process that opened it */
    char *buf;    /* NS_STATUS, NS_GEN, NS_TABLE: a snapshot taken at open */
    size_t len;
    const char *text;             /* NS_META */
    struct live_listing *listing; /* NS_DIR: what its listing goes on from (ns_readdir) */
};

/* An open waiting for its answer (open.c). */
struct pending_open;

/* The status file's size as shown to a process that does not hold it open (open.c): the
 * document's length then, plus STATUS_SLACK. That process's next open within STATUS_SEEN_NS
 * reads the document as it is at the open, padded with spaces to that size when it fits, so
 * a reader that stats, opens and copies the size it saw (tar) gets a whole document. */
#define STATUS_SEEN    8
#define STATUS_SEEN_NS 5000000000LL
#define STATUS_SLACK   256
struct status_seen {
    pid_t pid;     /* 0: free */
    int64_t at_ns; /* CLOCK_MONOTONIC */
    size_t size;
};

struct fs {
    struct arrayset *set;
    const struct ns *ns; /* the set's tree */
    struct timespec mtime;
    int64_t started_ns; /* CLOCK_REALTIME at mount: cache files changed later are "fresh" */
    uid_t uid;
    gid_t gid;
    int ready_fd;
    struct fuse_session *se;
    struct pt *pt;
    struct devio *dio; /* the device hooks: request counts, polling */
    struct vt *vt;
    uint64_t *bound;              /* per array of the set: encoded chunk size at most */
    size_t nbound;                /* the arrays at the start (a plate's grow, docs/plates.md) */
    _Atomic uint64_t chunk_reads; /* READ requests for chunks answered here */
    _Atomic uint64_t input_reads; /* ... for files of the input (ome = labels) */
    pthread_mutex_t handles_lock;
    struct handle handles;                /* list head: chunks and metadata */
    struct handle status;                 /* list head: open status files (few) */
    struct status_seen seen[STATUS_SEEN]; /* under handles_lock */
    pthread_mutex_t pending_lock;
    struct pending_open *pending; /* opens waiting for the engine (doubly linked) */
    struct watch *follow;         /* [input] watch (follow.c), or NULL */
};

/* ---- handles.c ---- */

/* A handle not listed yet: fill it, then handle_add (the list's readers see it whole). */
struct handle *handle_new(enum ns_kind kind);
void handle_add(struct fs *fs, struct handle *h);
/* Unlists and frees h (releasing its inode's version). */
void handle_free(struct fs *fs, struct handle *h);

/* The node behind inode ino, for any inode a lookup may have given (a later version's too:
 * n->ino is then the namespace inode). 0 or -ENOENT. */
int fs_node(struct fs *fs, uint64_t ino, struct ns_node *n);

/* caller.c: the calling thread takes the file system ids and groups of the process that made
 * req (a root daemon serving another user; else nothing changes) until caller_leave, which
 * keeps errno. 0, or -EACCES when its groups cannot be taken. */
#define CALLER_MAXG 256
struct caller_ids {
    bool switched;
    uid_t uid;
    gid_t gid;
    int nown;
    gid_t own[CALLER_MAXG];
};
int caller_enter(fuse_req_t req, struct caller_ids *saved);
void caller_leave(struct caller_ids *saved);

/* follow.c: [input] watch. Start once the session is mounted; stop before it goes. */
int fs_follow_start(struct fs *fs, struct errbuf *err);
void fs_follow_stop(struct fs *fs);
/* The status document's "watch" section (a new reference), or NULL when not watching. */
json_t *fs_follow_status(struct fs *fs);

/* open.c */
void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Size of the status file as process pid sees it: the snapshot it holds open, else the
 * document's size now plus STATUS_SLACK (kept for pid's next open: struct status_seen). */
size_t fs_status_size(struct fs *fs, pid_t pid);
/* Answers every open still waiting with err (the session loop has ended: unmount). */
void fs_answer_pending(struct fs *fs, int err);

#endif
