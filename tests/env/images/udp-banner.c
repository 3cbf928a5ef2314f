/* The UDP challenge (stack-env/udp:1): each datagram to the port (the first argument) gets one
 * back, naming the host (the stack) and the flag ($FLAG), as the TCP challenges' banner does.
 * Built static by `install`: the image holds no C library. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
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
