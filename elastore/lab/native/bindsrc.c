/*
 * bindsrc: make a lab node's outgoing connections leave from its own address.
 *
 * The lab runs every Cassandra node on 127.0.0.N inside one network namespace. Cassandra
 * binds its listening sockets to the node's address but not its outgoing ones, so every
 * internode connection (messaging, streaming, gossip) leaves from 127.0.0.1 and no packet
 * says which node sent it. On separate hosts the source address would be the sender's.
 * This LD_PRELOAD shim restores that: before an unbound TCP or UDP socket connects to a
 * loopback address, it binds it to $ELASTORE_BIND_IP (port 0, any free port). Sockets that
 * are already bound, and connections to anything but loopback, are left alone.
 *
 * Build: cc -shared -fPIC -O2 -o bindsrc.so bindsrc.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static int is_loopback(const struct sockaddr *addr) {
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        const unsigned char *b = in6->sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            return b[12] == 127;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

static int unbound(int fd) {
    struct sockaddr_storage cur;
    socklen_t len = sizeof cur;
    memset(&cur, 0, sizeof cur);
    if (getsockname(fd, (struct sockaddr *)&cur, &len) != 0)
        return 0;
    if (cur.ss_family == AF_INET)
        return ((struct sockaddr_in *)&cur)->sin_port == 0;
    if (cur.ss_family == AF_INET6)
        return ((struct sockaddr_in6 *)&cur)->sin6_port == 0;
    return 0;
}

static void bind_source(int fd, int family, const char *ip) {
    if (family == AF_INET) {
        struct sockaddr_in src;
        memset(&src, 0, sizeof src);
        src.sin_family = AF_INET;
        if (inet_pton(AF_INET, ip, &src.sin_addr) == 1)
            (void)bind(fd, (struct sockaddr *)&src, sizeof src);
    } else if (family == AF_INET6) {
        struct sockaddr_in6 src;
        char mapped[64] = "::ffff:";
        memset(&src, 0, sizeof src);
        src.sin6_family = AF_INET6;
        strncat(mapped, ip, sizeof mapped - strlen(mapped) - 1);
        if (inet_pton(AF_INET6, mapped, &src.sin6_addr) == 1)
            (void)bind(fd, (struct sockaddr *)&src, sizeof src);
    }
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static connect_fn real_connect;
    if (!real_connect)
        real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    const char *ip = getenv("ELASTORE_BIND_IP");
    if (ip && *ip && addr && is_loopback(addr) && unbound(fd))
        bind_source(fd, addr->sa_family, ip);
    return real_connect(fd, addr, len);
}
