/* The UDP challenge (stack-env/udp:1): each datagram to the port (the first argument) gets one
 * back, naming the host (the stack) and the flag ($FLAG), as the TCP challenges' banner does.
 * `udp-banner probe HOST PORT` is the participant's side, for `banner`'s $PROBES: one datagram
 * to HOST:PORT, success if one comes back within 2 s.
 * Built static by `install`: the images hold no C library. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int probe(const char *host, const char *port) {
    struct sockaddr_in target = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct timeval wait = {.tv_sec = 2};
    char answer[512];
    if (fd < 0 || inet_pton(AF_INET, host, &target.sin_addr) != 1 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) < 0 ||
        connect(fd, (struct sockaddr *)&target, sizeof target) < 0 || send(fd, "probe\n", 6, 0) < 0) {
        return 1;
    }
    return recv(fd, answer, sizeof answer, 0) >= 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "probe") == 0) {
        return probe(argv[2], argv[3]);
    }
    int port = argc > 1 ? atoi(argv[1]) : 9999;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        perror("udp-banner");
        return 1;
    }
    char host[256] = "", reply[1024], datagram[2048];
    gethostname(host, sizeof host - 1);
    const char *flag = getenv("FLAG");
    int length = snprintf(reply, sizeof reply, "stack-env udp challenge on %s\nflag: %s\n", host, flag ? flag : "none");
    for (;;) {
        struct sockaddr_storage from;
        socklen_t from_length = sizeof from;
        if (recvfrom(fd, datagram, sizeof datagram, 0, (struct sockaddr *)&from, &from_length) >= 0) {
            sendto(fd, reply, length, 0, (struct sockaddr *)&from, from_length);
        }
    }
}
